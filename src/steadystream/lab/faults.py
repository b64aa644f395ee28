"""Faults on demand: what a request should suffer, from the scenario or its ``X-Lab-Fault``.

Header grammar (comma separated, each at most once)::

    error-after=N             an in-band error event after N tokens, then [DONE]
    reset-after=N             the TCP connection is reset after N tokens (no clean end)
    echo-auth=N[:FORM]        after N tokens, an event that echoes the request's Authorization
                              header (FORM error: an in-band error event, the default;
                              malformed: a chunk cut off mid-JSON), then [DONE]
    stall-after=N:DURATION    no tokens for DURATION after N tokens (e.g. 20:3s, 5:500ms)
    stall-after=N:forever     no more tokens until the client goes away
    slow-first-token=DURATION the request waits DURATION before it is admitted
    oversize-after=N:SIZE     the event after N tokens is SIZE bytes (4MB, 512KiB, 65536;
                              at most 64MiB): its text is padded in one ``data:`` line
    silent-finish=DURATION    after the finish chunk, nothing (no usage, no [DONE], no close)
                              for DURATION; then the rest and a clean end

``error-after``, ``reset-after`` and ``echo-auth`` end the stream, so only one of them may be
given. A finish after an ending fault never comes, so ``silent-finish`` then does nothing.

A ``stall-after`` or ``slow-first-token`` pause is charged ``injected-fault`` in the ground
truth and counted in ``/metrics`` as it is played (``lab:injected_faults_total``,
:mod:`steadystream.lab.metrics`), so that ``explain`` with scraped engine metrics names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from steadystream._exceptions import SpecError
from steadystream._units import parse_duration, parse_size
from steadystream.lab.scenario import MAX_OVERSIZE_BYTES, FaultParams

__all__ = ["FAULT_HEADER", "EchoForm", "FaultSpec", "parse_fault_header"]

FAULT_HEADER = "X-Lab-Fault"

EchoForm = Literal["error", "malformed"]
"""How ``echo-auth`` shows the key: in an error event's message, or in a broken chunk."""

_ECHO_FORMS: tuple[EchoForm, ...] = ("error", "malformed")
_KEYS = (
    "error-after",
    "reset-after",
    "echo-auth",
    "stall-after",
    "slow-first-token",
    "oversize-after",
    "silent-finish",
)
_ENDINGS = ("error-after", "reset-after", "echo-auth")
_ACCEPTED = (
    "error-after=N, reset-after=N, echo-auth=N[:error|malformed], "
    "stall-after=N:DURATION|forever, slow-first-token=DURATION, oversize-after=N:SIZE, "
    "silent-finish=DURATION"
)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """The faults one request gets. Durations in ns; ``stall_ns`` None means forever."""

    error_after: int | None = None
    reset_after: int | None = None
    stall_after: int | None = None
    stall_ns: int | None = None
    slow_first_token_ns: int = 0
    echo_auth_after: int | None = None
    echo_auth_form: EchoForm = "error"
    oversize_after: int | None = None
    oversize_bytes: int = 0
    silent_finish_ns: int | None = None

    @property
    def any(self) -> bool:
        return (
            self.end_after is not None
            or self.stall_after is not None
            or self.slow_first_token_ns > 0
            or self.oversize_after is not None
            or self.silent_finish_ns is not None
        )

    @property
    def end_after(self) -> int | None:
        """Tokens after which the stream is ended by an error, an echo or a reset."""
        for value in (self.error_after, self.echo_auth_after, self.reset_after):
            if value is not None:
                return value
        return None

    def describe(self) -> str:
        """The header form of this spec (empty when there is no fault)."""
        parts = []
        if self.error_after is not None:
            parts.append(f"error-after={self.error_after}")
        if self.reset_after is not None:
            parts.append(f"reset-after={self.reset_after}")
        if self.echo_auth_after is not None:
            parts.append(f"echo-auth={self.echo_auth_after}:{self.echo_auth_form}")
        if self.stall_after is not None:
            length = "forever" if self.stall_ns is None else f"{self.stall_ns / 1e6:g}ms"
            parts.append(f"stall-after={self.stall_after}:{length}")
        if self.slow_first_token_ns:
            parts.append(f"slow-first-token={self.slow_first_token_ns / 1e6:g}ms")
        if self.oversize_after is not None:
            parts.append(f"oversize-after={self.oversize_after}:{self.oversize_bytes}")
        if self.silent_finish_ns is not None:
            parts.append(f"silent-finish={self.silent_finish_ns / 1e6:g}ms")
        return ",".join(parts)

    @classmethod
    def from_params(cls, params: FaultParams) -> FaultSpec:
        return cls(
            error_after=params.error_after,
            reset_after=params.reset_after,
            stall_after=params.stall_after,
            stall_ns=_ns(params.stall_ms),
            slow_first_token_ns=round(params.slow_first_token_ms * 1e6),
            echo_auth_after=params.echo_auth_after,
            echo_auth_form=params.echo_auth_form,
            oversize_after=params.oversize_after,
            oversize_bytes=params.oversize_bytes,
            silent_finish_ns=_ns(params.silent_finish_ms),
        )


def _ns(ms: float | None) -> int | None:
    return None if ms is None else round(ms * 1e6)


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
            raise SpecError(f"{FAULT_HEADER}: cannot read {part!r} (accepted: {_ACCEPTED})")
        if key in fields:
            raise SpecError(f"{FAULT_HEADER}: {key} is given twice")
        fields[key] = arg.strip()
    endings = [key for key in _ENDINGS if key in fields]
    if len(endings) > 1:
        raise SpecError(f"{FAULT_HEADER}: {' and '.join(endings)} cannot be combined")
    stall_after: int | None = None
    stall_ns: int | None = None
    if "stall-after" in fields:
        count, length = _pair(fields, "stall-after", "N:DURATION or N:forever")
        stall_after = _int(count, "stall-after")
        if length.lower() != "forever":
            stall_ns = _duration(length, "stall-after")
    echo_after: int | None = None
    echo_form: EchoForm = "error"
    if "echo-auth" in fields:
        count, colon, form = fields["echo-auth"].partition(":")
        echo_after = _int(count, "echo-auth")
        if colon:
            echo_form = _echo_form(form.strip().lower())
    oversize_after: int | None = None
    oversize_bytes = 0
    if "oversize-after" in fields:
        count, size = _pair(fields, "oversize-after", "N:SIZE (e.g. 5:4MB)")
        oversize_after = _int(count, "oversize-after")
        oversize_bytes = parse_size(size, name=f"{FAULT_HEADER} oversize-after")
        if not 0 < oversize_bytes <= MAX_OVERSIZE_BYTES:
            raise SpecError(
                f"{FAULT_HEADER}: oversize-after needs a size above 0 and at most "
                f"{MAX_OVERSIZE_BYTES} bytes (64MiB), got {size!r}"
            )
    return FaultSpec(
        error_after=_count(fields, "error-after"),
        reset_after=_count(fields, "reset-after"),
        stall_after=stall_after,
        stall_ns=stall_ns,
        slow_first_token_ns=_optional_duration(fields, "slow-first-token") or 0,
        echo_auth_after=echo_after,
        echo_auth_form=echo_form,
        oversize_after=oversize_after,
        oversize_bytes=oversize_bytes,
        silent_finish_ns=_optional_duration(fields, "silent-finish"),
    )


def _pair(fields: dict[str, str], key: str, shape: str) -> tuple[str, str]:
    first, colon, second = fields[key].partition(":")
    if not colon:
        raise SpecError(f"{FAULT_HEADER}: {key} needs {shape}, got {fields[key]!r}")
    return first, second.strip()


def _echo_form(form: str) -> EchoForm:
    for accepted in _ECHO_FORMS:
        if form == accepted:
            return accepted
    raise SpecError(f"{FAULT_HEADER}: echo-auth form must be error or malformed, got {form!r}")


def _optional_duration(fields: dict[str, str], key: str) -> int | None:
    return _duration(fields[key], key) if key in fields else None


def _duration(text: str, key: str) -> int:
    value = parse_duration(text, name=f"{FAULT_HEADER} {key}")
    if value < 0:
        raise SpecError(f"{FAULT_HEADER}: durations cannot be negative")
    return value


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
