"""Faults on demand: what a request should suffer, from the scenario or its ``X-Lab-Fault``.

Header grammar (comma separated, each at most once)::

    error-after=N             an in-band error event after N tokens, then [DONE]
    reset-after=N             the TCP connection is reset after N tokens (no clean end)
    stall-after=N:DURATION    no tokens for DURATION after N tokens (e.g. 20:3s, 5:500ms)
    stall-after=N:forever     no more tokens until the client goes away
    slow-first-token=DURATION the request waits DURATION before it is admitted

``error-after`` and ``reset-after`` end the stream, so only one of them may be given.
"""

from __future__ import annotations

from dataclasses import dataclass

from steadystream._exceptions import SpecError
from steadystream._units import parse_duration
from steadystream.lab.scenario import FaultParams

__all__ = ["FAULT_HEADER", "FaultSpec", "parse_fault_header"]

FAULT_HEADER = "X-Lab-Fault"

_KEYS = ("error-after", "reset-after", "stall-after", "slow-first-token")


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """The faults one request gets. Durations in ns; ``stall_ns`` None means forever."""

    error_after: int | None = None
    reset_after: int | None = None
    stall_after: int | None = None
    stall_ns: int | None = None
    slow_first_token_ns: int = 0

    @property
    def any(self) -> bool:
        return (
            self.error_after is not None
            or self.reset_after is not None
            or self.stall_after is not None
            or self.slow_first_token_ns > 0
        )

    @property
    def end_after(self) -> int | None:
        """Tokens after which the stream is ended by an error or a reset."""
        return self.error_after if self.error_after is not None else self.reset_after

    def describe(self) -> str:
        """The header form of this spec (empty when there is no fault)."""
        parts = []
        if self.error_after is not None:
            parts.append(f"error-after={self.error_after}")
        if self.reset_after is not None:
            parts.append(f"reset-after={self.reset_after}")
        if self.stall_after is not None:
            length = "forever" if self.stall_ns is None else f"{self.stall_ns / 1e6:g}ms"
            parts.append(f"stall-after={self.stall_after}:{length}")
        if self.slow_first_token_ns:
            parts.append(f"slow-first-token={self.slow_first_token_ns / 1e6:g}ms")
        return ",".join(parts)

    @classmethod
    def from_params(cls, params: FaultParams) -> FaultSpec:
        return cls(
            error_after=params.error_after,
            reset_after=params.reset_after,
            stall_after=params.stall_after,
            stall_ns=None if params.stall_ms is None else round(params.stall_ms * 1e6),
            slow_first_token_ns=round(params.slow_first_token_ms * 1e6),
        )


def parse_fault_header(value: str) -> FaultSpec:
    """Parse an ``X-Lab-Fault`` value; a :class:`SpecError` names the header and the part."""
    fields: dict[str, str] = {}
    for raw in value.split(","):
        part = raw.strip()
        if not part:
            continue
        key, sep, arg = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in _KEYS:
            raise SpecError(
                f"{FAULT_HEADER}: cannot read {part!r} (accepted: error-after=N, reset-after=N, "
                "stall-after=N:DURATION|forever, slow-first-token=DURATION)"
            )
        if key in fields:
            raise SpecError(f"{FAULT_HEADER}: {key} is given twice")
        fields[key] = arg.strip()
    error_after = _count(fields, "error-after")
    reset_after = _count(fields, "reset-after")
    if error_after is not None and reset_after is not None:
        raise SpecError(f"{FAULT_HEADER}: error-after and reset-after cannot be combined")
    stall_after: int | None = None
    stall_ns: int | None = None
    if "stall-after" in fields:
        count, colon, length = fields["stall-after"].partition(":")
        if not colon:
            raise SpecError(
                f"{FAULT_HEADER}: stall-after needs N:DURATION or N:forever, "
                f"got {fields['stall-after']!r}"
            )
        stall_after = _int(count, "stall-after")
        if length.strip().lower() != "forever":
            stall_ns = parse_duration(length, name=f"{FAULT_HEADER} stall-after")
    slow = 0
    if "slow-first-token" in fields:
        slow = parse_duration(fields["slow-first-token"], name=f"{FAULT_HEADER} slow-first-token")
    if slow < 0 or (stall_ns is not None and stall_ns < 0):
        raise SpecError(f"{FAULT_HEADER}: durations cannot be negative")
    return FaultSpec(error_after, reset_after, stall_after, stall_ns, slow)


def _count(fields: dict[str, str], key: str) -> int | None:
    return _int(fields[key], key) if key in fields else None


def _int(text: str, key: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SpecError(f"{FAULT_HEADER}: {key} needs a token count, got {text!r}") from None
    if value < 0:
        raise SpecError(f"{FAULT_HEADER}: {key} cannot be negative, got {value}")
    return value
