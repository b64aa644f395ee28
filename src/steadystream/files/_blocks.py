"""Event arrays of many streams at once: checked in a few numpy calls, cut into timelines.

A block holds the streams of a few megabytes of file one after another in one array per
field. The checks a reader needs (times never decrease within a stream, counts fit in 32 bits
and are not negative, kind letters are known) run over the whole block; only a block that
fails is searched for the stream to blame. Timelines cut from a block share its arrays.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from steadystream._exceptions import TimelineFormatError
from steadystream._types import EventKind
from steadystream.timeline import SKEW_NS, Timeline

__all__ = [
    "COUNT_FIELDS",
    "EVENT_LISTS",
    "INT32_MAX",
    "TIME_LIMIT_NS",
    "array_fault",
    "assemble",
    "concat",
    "kind_letters",
    "packers",
    "unpack",
]

COUNT_FIELDS = ("tokens", "wire_bytes", "text_bytes")
"""The int32 event arrays, besides ``times`` and ``kinds``."""

INT32_MAX = 2**31 - 1
TIME_LIMIT_NS = 2**63 - SKEW_NS
"""Times in files stay below this: a gap from the earliest time a reader takes (``-SKEW_NS``)
to any later one then fits in int64, as the metrics take it (2**63 - 1 after a time of -1 ms
would wrap to a negative gap)."""
_EMPTY_INT64 = np.empty(0, dtype=np.int64)

# Kind value -> ASCII letter (writing) and ASCII byte -> kind value, 255 for unknown (reading).
_LETTERS = np.zeros(max(EventKind) + 1, dtype=np.uint8)
_CODES = np.full(256, 255, dtype=np.uint8)
for _kind in EventKind:
    _LETTERS[_kind] = ord(_kind.code)
    _CODES[ord(_kind.code)] = _kind
_LETTER_LIST = ", ".join(k.code for k in EventKind)


def kind_letters(kinds: npt.NDArray[np.integer[Any]]) -> str | None:
    """The kinds as on-disk letters, or None when a value is no :class:`EventKind`."""
    if kinds.dtype.kind != "u" and kinds.size and kinds.min() < 0:
        return None  # (take counts a negative index from the end)
    try:
        return _LETTERS.take(kinds).tobytes().decode("ascii")
    except IndexError:
        return None


def concat(arrays: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """The arrays one after another (an empty int64 array for none)."""
    return np.concatenate(arrays) if arrays else _EMPTY_INT64


EVENT_LISTS = ("times", *COUNT_FIELDS)
"""The event arrays that a JSONL record holds as lists of integers."""


@functools.lru_cache(maxsize=1024)
def packers(n: int) -> tuple[Callable[..., bytes], Callable[..., bytes]]:
    """Functions that pack ``n`` Python ints to int64 and to int32 bytes, or raise struct.error.

    ``struct`` is strict (a float or a string is refused, where ``np.array`` would cast it)
    and about twice as fast as ``np.array`` on a list of ints.
    """
    # Native order with standard sizes: q is 8 bytes and i is 4 on every platform.
    return struct.Struct(f"={n}q").pack, struct.Struct(f"={n}i").pack


def unpack(parts: list[bytes], dtype: type[np.signedinteger[Any]]) -> npt.NDArray[Any]:
    """One array of the packed parts, one after another."""
    buffer = bytearray().join(parts)  # a bytearray, so the arrays are writable
    return np.frombuffer(buffer, dtype=dtype) if buffer else np.empty(0, dtype=dtype)


def assemble(
    fields: list[dict[str, Any]],
    lengths: list[int],
    times: npt.NDArray[Any],
    counts: Mapping[str, npt.NDArray[Any]],
    kinds: list[str],
    *,
    path: str,
    lines: list[int],
) -> list[Timeline]:
    """Check a block's event arrays at once and cut them into timelines.

    ``times`` and ``counts`` hold the block's streams one after another; ``lines`` gives the
    line (or Parquet row) of each stream for error messages.
    """
    fault = array_fault(lengths, times, counts, least_ns=-SKEW_NS)
    if fault is not None:
        index, field, message = fault
        raise TimelineFormatError(message, path=path, line=lines[index], field=field)
    codes = _kind_codes(kinds, path, lines)
    times = times.astype(np.int64, copy=False)
    tokens, wire_bytes, text_bytes = (
        counts[name].astype(np.int32, copy=False) for name in COUNT_FIELDS
    )
    timelines = []
    start = 0
    for extra, n in zip(fields, lengths, strict=True):
        end = start + n
        timelines.append(
            Timeline(
                times=times[start:end],
                tokens=tokens[start:end],
                wire_bytes=wire_bytes[start:end],
                text_bytes=text_bytes[start:end],
                kinds=codes[start:end],
                **extra,
                _checked=True,  # by array_fault and stream_fields, so not checked again
            )
        )
        start = end
    return timelines


def array_fault(
    lengths: list[int],
    times: npt.NDArray[Any],
    counts: Mapping[str, npt.NDArray[Any]],
    *,
    least_ns: int = 0,
) -> tuple[int, str, str] | None:
    """The first stream of a block a reader must reject: (index in block, field, message).

    A time below ``least_ns`` is one before the request was sent (readers pass
    ``-SKEW_NS``, see ``steadystream.timeline``; writers 0)."""
    ends = np.cumsum(lengths)

    def place(at: int) -> tuple[int, int]:
        """The stream of the block's ``at``-th time, and its event's index in it."""
        stream = int(np.searchsorted(ends, at, side="right"))
        return stream, at - (int(ends[stream]) - lengths[stream])

    if times.size > 1:
        back = times[1:] < times[:-1]
        joins = ends[:-1]
        back[joins[(joins > 0) & (joins < times.size)] - 1] = False  # pairs across two streams
        if back.any():
            at = int(np.argmax(back)) + 1
            stream, event = place(at)
            back_step = f"event {event} at {times[at]} ns follows {times[at - 1]} ns"
            return stream, "times", f"times must not decrease: {back_step}"
    if times.size and times.min() < least_ns:  # (times do not decrease: a first is its least)
        at = int(np.argmax(times < least_ns))
        stream, event = place(at)
        return (
            stream,
            "times",
            f"times must not be negative (they count from the request sent): "
            f"event {event} at {times[at]} ns",
        )
    if times.size and times.max() >= TIME_LIMIT_NS:
        at = int(np.argmax(times >= TIME_LIMIT_NS))
        stream, event = place(at)
        return (
            stream,
            "times",
            f"times must be below 2**63 - {SKEW_NS} ns (so that every gap fits in 64 bits):"
            f" event {event} at {times[at]} ns",
        )
    for name, array in counts.items():
        if array.size and (array.min() < 0 or array.max() > INT32_MAX):
            at = int(np.argmax((array < 0) | (array > INT32_MAX)))
            stream = int(np.searchsorted(ends, at, side="right"))
            return stream, name, f"{name} must hold integers from 0 to {INT32_MAX}"
    return None


def _kind_codes(kinds: list[str], path: str, lines: list[int]) -> npt.NDArray[np.uint8]:
    letters = "".join(kinds)
    if letters.isascii():
        codes: npt.NDArray[np.uint8] = _CODES[np.frombuffer(letters.encode("ascii"), np.uint8)]
        if not (codes == 255).any():
            return codes
    for index, stream_letters in enumerate(kinds):  # a fault: find the first bad letter
        for event, letter in enumerate(stream_letters):
            if not letter.isascii() or _CODES[ord(letter)] == 255:
                raise TimelineFormatError(
                    f"unknown kind letter {letter!r} at event {event}; letters are {_LETTER_LIST}",
                    path=path,
                    line=lines[index],
                    field="kinds",
                )
    raise AssertionError("unreachable: the loop above finds the bad letter")
