"""The X-Lab-Fault header grammar."""

from __future__ import annotations

import pytest

from steadystream import SpecError
from steadystream.lab import FaultSpec, parse_fault_header

S = 1_000_000_000


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("error-after=20", FaultSpec(error_after=20)),
        ("reset-after=0", FaultSpec(reset_after=0)),
        ("stall-after=20:3s", FaultSpec(stall_after=20, stall_ns=3 * S)),
        ("stall-after=5:forever", FaultSpec(stall_after=5, stall_ns=None)),
        ("slow-first-token=2s", FaultSpec(slow_first_token_ns=2 * S)),
        (
            " Error-After=7 , stall-after=2:250ms,slow-first-token=500ms ",
            FaultSpec(error_after=7, stall_after=2, stall_ns=S // 4, slow_first_token_ns=S // 2),
        ),
        ("", FaultSpec()),
    ],
)
def test_header_grammar(header: str, expected: FaultSpec) -> None:
    assert parse_fault_header(header) == expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("explode=1", "cannot read 'explode=1'"),
        ("error-after", "cannot read"),
        ("error-after=x", "error-after needs a token count"),
        ("error-after=-2", "cannot be negative"),
        ("error-after=1,error-after=2", "given twice"),
        ("error-after=1,reset-after=2", "cannot be combined"),
        ("stall-after=3", "N:DURATION or N:forever"),
        ("stall-after=3:soon", "stall-after"),
        ("slow-first-token=fast", "slow-first-token"),
    ],
)
def test_bad_headers_name_the_header_and_part(header: str, expected: str) -> None:
    with pytest.raises(SpecError, match="X-Lab-Fault") as raised:
        parse_fault_header(header)
    assert expected in str(raised.value)


def test_describe_round_trips() -> None:
    spec = FaultSpec(error_after=3, stall_after=1, stall_ns=S, slow_first_token_ns=S // 10)
    assert parse_fault_header(spec.describe()) == spec
    assert FaultSpec().describe() == ""
    assert not FaultSpec().any
    assert spec.any
