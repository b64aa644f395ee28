"""The gateway soak (benchmarks/soak_gateway.py): its parts, and a short run of the whole.

The short run starts two labs and a gateway as child processes, sends 60 streams of every
kind in the mix over 20 s, and requires every check to pass: one record with the right outcome
per stream, no upstream stream left open, bounded RSS, cancel at the engine p99 <= 100 ms, no
silent truncation, no key anywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def soak() -> Iterator[dict[str, ModuleType]]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import _soak_checks
        import _soak_client
        import _soak_plan

        yield {"plan": _soak_plan, "client": _soak_client, "checks": _soak_checks}
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_plan_has_every_kind_in_proportion(soak: dict[str, ModuleType]) -> None:
    plan = soak["plan"]
    plans = plan.plan_streams(plan.SoakShape(streams=60, seconds=20, seed=3))
    assert len(plans) == 60
    kinds = {p.kind.name for p in plans}
    assert kinds == {kind.name for kind in plan.KINDS}
    assert len({p.request_id for p in plans}) == 60
    assert max(p.start_s for p in plans) <= 20 * 0.85
    faults = [p.fault for p in plans if p.fault]
    for prefix in ("stall-after", "reset-after", "error-after", "oversize-after", "echo-auth"):
        assert any(f.startswith(prefix) for f in faults), prefix
    assert plans == plan.plan_streams(plan.SoakShape(streams=60, seconds=20, seed=3))
    with pytest.raises(ValueError, match="at least"):
        plan.plan_streams(plan.SoakShape(streams=3))


def test_the_key_scanner_finds_a_key_split_over_reads(soak: dict[str, ModuleType]) -> None:
    client = soak["client"]
    keys = {"a": "sk-a-0123456789abcdef0123", "b": "sk-b-fedcba9876543210fedc"}
    scanner = client.KeyScanner(keys)
    for piece in (b"data: {... Bearer sk-a-0123", b"456789ab", b"cdef0123 ...}\n\n"):
        scanner.feed(piece)
    assert scanner.found == {"a"}
    # The start of a key, cut short by a relay, is a leak too; its harmless prefix is not.
    cut = client.KeyScanner(keys)
    cut.feed(b"Bearer sk-b-fedcba987654...")
    assert cut.found == {"b"}
    tail = client.KeyScanner(keys)
    tail.feed(b"...9876543210fedc")
    assert tail.found == {"b"}
    prefix = client.KeyScanner(keys)
    prefix.feed(b"Bearer sk-b-fedcba98765...")  # 11 characters of the secret
    assert prefix.found == set()


def test_the_rss_slope_ignores_one_spike(soak: dict[str, ModuleType]) -> None:
    checks = soak["checks"]
    times = [float(t) for t in range(120)]
    flat = [100.0 * 2**20] * 120
    flat[60] += 500 * 2**20  # one 8 MB event's worth of buffers, and more
    assert checks.theil_sen_slope(times, flat) == 0.0
    growing = [100.0 * 2**20 + t * 2**20 for t in times]  # 1 MiB a second
    samples = list(zip(times, [int(v) for v in growing], strict=True))
    verdict = checks.check_rss(samples, checks.Limits())
    assert not verdict.ok
    assert verdict.figures["slope_last_half_mib_per_min"] == pytest.approx(60.0)


@pytest.mark.slow
@pytest.mark.integration
def test_a_short_soak_passes_every_check(tmp_path: Path) -> None:
    out = tmp_path / "soak"
    command = [
        sys.executable,
        str(BENCHMARKS / "soak_gateway.py"),
        "--streams=60",
        "--minutes=0.34",
        "--seed=5",
        "--long-tokens=1000",
        "--stuck-hold=45s",
        f"--out={out}",
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=420, check=False)
    report = run.stdout + run.stderr
    summary = json.loads((out / "summary.json").read_text())
    checks = {check["name"]: check for check in summary["checks"]}
    failed = [name for name, check in checks.items() if not check["ok"]]
    assert failed == [], report
    assert run.returncode == 0, report
    records = checks["one record, right outcome"]["figures"]
    assert records["lost"] == 0
    assert sum(records["outcomes"].values()) == 60
    assert any(key.startswith("stuck-reader: client-stuck") for key in records["outcomes"])
    assert checks["upstream streams closed"]["figures"]["echoed"] >= 2
    assert checks["cancel at the engine"]["figures"]["timed"] >= 3
    assert checks["no key anywhere"]["figures"]["found"] == []
