"""How a pydantic field shows on the command line: its :class:`Flag`, and where its help goes.

Every option of every command is a field of a pydantic model (bench's
:class:`~steadystream.bench.config.BenchConfig`, the groups of :mod:`steadystream.cli._groups`,
a command's own few) annotated with a :class:`Flag`; :mod:`steadystream.cli._models` turns
those fields into the command's parameters. Only dataclasses here: the field's type, default
and check are pydantic's, and an option several commands share is declared once, with all
of them, in :mod:`steadystream._options`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DURATION", "Flag", "Panel", "option_name"]

DURATION = "DURATION"
"""How ``--help`` names a duration's value: written ``400ms``, ``1.5s``, ``2m``."""


@dataclass(frozen=True, slots=True)
class Flag:
    """How a field shows on the command line.

    ``names`` defaults to ``--field-name`` (and ``--no-field-name`` for a switch);
    ``argument`` makes it positional; ``text`` reads it as text where the field holds a
    number (a duration: ``400ms``); ``metavar`` is how ``--help`` names the value where its
    type says too little (``KEY=VALUE``).
    """

    help: str
    panel: str | None = None
    names: tuple[str, ...] = ()
    argument: bool = False
    text: bool = False
    metavar: str | None = None


@dataclass(frozen=True, slots=True)
class Panel:
    """The help panel a shared option (or a group of them) shows in, in one command.

    Where an option is shown is the command's layout, not the option's definition: bench
    lists ``--stall-threshold`` under "Gate and sweep", ``analyze`` among its options. It
    overrides the :class:`Flag`'s own panel: ``Annotated[StallThreshold, Panel("Gate")]``.
    """

    name: str | None


def option_name(field: str) -> str:
    """``cancel_after`` as the command line and every message name it: ``--cancel-after``."""
    return "--" + field.replace("_", "-")
