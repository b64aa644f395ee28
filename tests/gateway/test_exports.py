"""The gateway package's public face: small, explicit, every name real."""

from __future__ import annotations

from steadystream import gateway


def test_every_exported_name_exists_once_and_in_order() -> None:
    assert all(hasattr(gateway, name) for name in gateway.__all__)
    assert len(set(gateway.__all__)) == len(gateway.__all__)
    assert gateway.__all__ == sorted(gateway.__all__, key=lambda n: (not n.isupper(), n))


def test_public_names_are_exported() -> None:
    public = {
        name
        for name, value in vars(gateway).items()
        if not name.startswith("_")
        and getattr(value, "__module__", "").startswith("steadystream.gateway")
    }
    assert public <= set(gateway.__all__), public - set(gateway.__all__)
