"""One request of a peer's file as a timeline, and the checks every importer shares.

A peer keeps less than a timeline holds, and each importer says what its format knows: the
chunk times always (that is what makes a format importable), the chunks' text sometimes,
a token total per request mostly. What is not known is marked as the data model marks it
(docs/format.md#peers): ``texts`` None, ``wire_bytes`` 0, and ``token_source``
``usage-even`` (a total spread evenly over the chunks) or ``unknown`` (no count at all: one
token a chunk holds each chunk's place, and the metrics of tokens are None).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from steadystream._exceptions import TimelineFormatError
from steadystream._types import EventKind, Int64Array, Outcome, TokenSource, Where
from steadystream.timeline import Timeline, assign_tokens, estimate_tokens

__all__ = [
    "MAX_CHUNKS",
    "MAX_CLOCK_NS",
    "MAX_ERROR_CHARS",
    "MAX_SPAN_NS",
    "MAX_TOKENS_PER_CHUNK",
    "RecordFault",
    "even_tokens",
    "request_timeline",
    "scrub_error",
]

MAX_CHUNKS = 1 << 22
"""The most chunks one request may have (4 M): a longer list is refused, not held."""
MAX_TOKENS_PER_CHUNK = 1 << 16
"""The most tokens a request's total may give each chunk it timed (64 Ki): a whole answer
buffered into one chunk is one, a total of 2**31 over three chunks is no stream's, and would
make every metric of tokens (and the memory behind them) follow a number the file made up."""
MAX_ERROR_CHARS = 500
"""A peer's error message is cut to this many characters (tracebacks run to pages)."""

MAX_SPAN_NS = 7 * 86_400 * 10**9
"""No request lasts a week: a time from a request's start past that (a first chunk, a gap,
the gaps' sum, an end) is refused, so that no number a file holds overflows a timeline's
integer nanoseconds or turns its times back."""
MAX_CLOCK_NS = 2**63 - 1
"""A clock's stamp in nanoseconds (Unix or perf_counter) fits a signed 64-bit integer."""

_INT32_MAX = 2**31 - 1
_CREDENTIAL = re.compile(
    # A key's name, after anything but a letter or digit (``OPENAI_API_KEY``, ``HF_TOKEN``,
    # ``Ocp-Apim-Subscription-Key``), or ``key`` as a URL's query parameter (Gemini's
    # ``?key=``); then its value: quoted (to its closing quote, Python's ``b'...'`` too) or
    # bare (to a space, a quote, a separator or the next query parameter), after an optional
    # auth scheme.
    r"(?i)(?P<name>(?<![a-z0-9])(?:authorization|proxy-authorization|x-api-key|api[-_]?key"
    r"|subscription[-_]?key|access[-_]?token|refresh[-_]?token|auth[-_]?token|token|cookie"
    r"|password|passwd|secret|client[-_]?secret)|(?<=[?&])key)"
    r"(?P<sep>['\"]?\s*[:=]\s*)(?:b?['\"]?(?:bearer|basic|token)\s+)?"
    r"(?:b?\"[^\"]*\"|b?'[^']*'|[^\s\"',;}&]+)"
    r"|\b(?P<scheme>bearer|basic)\s+[^\s\"',;}]+"
    # keys known by their prefix: OpenAI's, Hugging Face's, Groq's, Google's
    r"|(?<![a-z0-9])(?:sk-[a-z0-9_-]{8,}|hf_[a-z0-9]{8,}|gsk_[a-z0-9]{8,}|aiza[a-z0-9_-]{8,})"
    r"|(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"  # a URL's user:password
)


class RecordFault:
    """Raises the error of one record of a file: the file, the record, the field.

    ``line`` is the line of a JSONL file (the record is the line); in a JSON document, the
    record is named in the message (``request 12``) and ``line`` is None.
    """

    __slots__ = ("line", "path", "record")

    def __init__(self, path: str, record: str, line: int | None = None) -> None:
        self.path = path
        self.record = record
        self.line = line

    def fail(self, message: str, field: str) -> NoReturn:
        prefix = "" if self.line is not None else f"{self.record}: "
        raise TimelineFormatError(prefix + message, path=self.path, line=self.line, field=field)

    def number(self, value: Any, field: str, *, unit: str, most: float = MAX_CLOCK_NS) -> float:
        """A finite, non-negative JSON number (bools are not numbers), at most ``most``."""
        if type(value) is not int and type(value) is not float:
            shown = "missing" if value is None else type(value).__name__
            self.fail(f"{field} must be a number of {unit}, not {shown}", field)
        if not math.isfinite(value) or value < 0:
            self.fail(f"{field} must be a finite number of {unit} at least 0, not {value}", field)
        if value > most:
            self.fail(f"{field} must be at most {most:g} {unit}, not {value:g}", field)
        return float(value)

    def span(self, value: Any, field: str, *, scale: float, unit: str) -> int:
        """A time from the request's start in ``unit`` (× ``scale`` to nanoseconds), as
        integer nanoseconds, at most :data:`MAX_SPAN_NS` (a week)."""
        found = self.number(value, field, unit=unit, most=MAX_SPAN_NS / scale)
        return round(found * scale)

    def stamp(self, value: Any, field: str) -> int:
        """A clock's integer nanoseconds: from 0 to :data:`MAX_CLOCK_NS`."""
        if type(value) is not int or not 0 <= value <= MAX_CLOCK_NS:
            shown = value if type(value) is int else type(value).__name__
            self.fail(f"{field} must be integer nanoseconds from 0 to 2**63-1, not {shown}", field)
        return value

    def count(self, value: Any, field: str, *, chunks: int | None = None) -> int | None:
        """A token count: a non-negative integer below 2**31, or None when absent.

        With ``chunks`` (a completion total laid over that many timed chunks), at most
        :data:`MAX_TOKENS_PER_CHUNK` a chunk.
        """
        if value is None:
            return None
        if type(value) is float and value.is_integer():
            value = int(value)
        if type(value) is not int or not 0 <= value <= _INT32_MAX:
            self.fail(f"{field} must be an integer from 0 to {_INT32_MAX}, not {value!r}", field)
        if chunks and value > chunks * MAX_TOKENS_PER_CHUNK:
            self.fail(
                f"{field} is {value:,} tokens over {chunks:,} chunks: more than"
                f" {MAX_TOKENS_PER_CHUNK:,} a chunk, which no stream holds",
                field,
            )
        return int(value)

    def numbers(self, values: Any, field: str, *, scale: float, unit: str) -> Int64Array:
        """A list of non-negative numbers of ``unit``, as integer nanoseconds (× ``scale``)."""
        if type(values) is not list:
            shown = "missing" if values is None else type(values).__name__
            self.fail(f"{field} must be a list of numbers of {unit}, not {shown}", field)
        if len(values) > MAX_CHUNKS:
            self.fail(
                f"{field} has {len(values):,} entries; at most {MAX_CHUNKS:,} are read", field
            )
        try:
            array = np.array(values, dtype=np.float64)
        except (TypeError, ValueError):
            array = None
        if array is None or array.ndim != 1 or any(type(v) is bool for v in values):
            bad = next(
                (i for i, v in enumerate(values) if type(v) not in (int, float)), len(values)
            )
            self.fail(f"{field}[{bad}] must be a number of {unit}", field)
        finite = np.isfinite(array) & (array >= 0)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            self.fail(f"{field}[{bad}] must be a finite number of {unit} at least 0", field)
        if float(array.sum()) * scale > MAX_SPAN_NS:  # the gaps add up to the last chunk
            self.fail(f"{field} adds up to more than a week: no stream lasts that long", field)
        return np.rint(array * scale).astype(np.int64)

    def ordered(self, times: Int64Array, field: str) -> Int64Array:
        """Chunk times that start at or after the request and never go back."""
        if len(times) and int(times[0]) < 0:
            self.fail(f"{field}: the first chunk came before the request was sent", field)
        back = np.flatnonzero(np.diff(times) < 0)
        if len(back):
            self.fail(f"{field}: chunk {int(back[0]) + 1} came before the one ahead of it", field)
        if len(times) and int(times[-1]) > MAX_SPAN_NS:
            self.fail(f"{field}: the last chunk came more than a week after the request", field)
        return times


def scrub_error(message: Any) -> str | None:
    """A peer's error message fit to keep: text, cut short, with credentials hidden."""
    if message is None or message == "":
        return None
    text = message if isinstance(message, str) else repr(message)
    text = _CREDENTIAL.sub(_hide, text)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    return text


def _hide(match: re.Match[str]) -> str:
    if match["name"]:
        return f"{match['name']}{match['sep']}***"
    if match["scheme"]:
        return f"{match['scheme']} ***"
    return "***"


def even_tokens(chunks: int, total: int) -> npt.NDArray[np.int32]:
    """``total`` tokens over ``chunks`` chunks whose sizes are unknown: evenly, the remainder
    one each to the first; never a chunk without a token, so that every chunk a peer timed
    stays a text event (the counts then add to the chunks, above a smaller total)."""
    base, extra = divmod(total, chunks) if chunks else (0, 0)
    tokens = np.full(chunks, max(base, 1), dtype=np.int32)
    if base >= 1:
        tokens[:extra] += 1
    return tokens


def request_timeline(
    *,
    stream_id: str,
    times: Int64Array,
    completion_tokens: int | None,
    prompt_tokens: int | None = None,
    texts: Sequence[str] | None = None,
    kinds: npt.NDArray[np.uint8] | None = None,
    answer: str | None = None,
    end_ns: int | None = None,
    outcome: Outcome = Outcome.COMPLETE,
    error: str | None = None,
    started_at: float | None = None,
    labels: Mapping[str, str] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Timeline:
    """A timeline from what a peer recorded of one request.

    ``times`` is every chunk's arrival in nanoseconds from the request's start; ``kinds``
    defaults to content for each. With ``texts`` (a format that keeps each chunk's text) the
    token counts follow docs/format.md#token-counts as for a stream recorded here; without,
    a ``completion_tokens`` total is spread evenly (``usage-even``), an ``answer`` (the whole
    text, no chunk's own) gives an estimate spread evenly (``estimated``), and with neither
    each chunk holds one token in place of a count (``unknown``). Texts are used for the
    counts and the byte sizes, and are not kept: a peer's answers are not stored unless a
    writer is asked to (and then there are none to store).
    """
    n = len(times)
    if kinds is None:
        kinds = np.full(n, int(EventKind.CONTENT), dtype=np.uint8)
    given = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    usage = {key: count for key, count in given.items() if count is not None} or None
    if texts is not None:
        text_bytes = np.fromiter((len(t.encode()) for t in texts), dtype=np.int32, count=n)
        tokens, source = assign_tokens(
            kinds, text_bytes, texts=texts, usage_completion_tokens=completion_tokens
        )
    else:
        text_bytes = np.zeros(n, dtype=np.int32)
        if n == 0:  # nothing arrived: nothing to count, nothing unknown
            tokens, source = np.zeros(0, dtype=np.int32), TokenSource.EXACT
        elif completion_tokens == n:
            tokens, source = np.ones(n, dtype=np.int32), TokenSource.USAGE_ONE_PER_EVENT
        elif completion_tokens:
            tokens, source = even_tokens(n, completion_tokens), TokenSource.USAGE_EVEN
        elif answer:
            tokens, source = even_tokens(n, estimate_tokens(answer)), TokenSource.ESTIMATED
        else:
            tokens, source = np.ones(n, dtype=np.int32), TokenSource.UNKNOWN
    last = int(times[-1]) if n else None
    if end_ns is not None and last is not None and end_ns < last:
        end_ns = last  # a peer's end stamp taken before its last chunk's: the chunk counts
    return Timeline(
        stream_id=stream_id,
        where=Where.CLIENT,
        times=times,
        tokens=tokens,
        wire_bytes=np.zeros(n, dtype=np.int32),
        text_bytes=text_bytes,
        kinds=kinds,
        first_byte_ns=None,  # no peer stamps the first byte of the body
        end_ns=end_ns if end_ns is not None else last,
        outcome=outcome,
        error=error,
        usage=usage,
        token_source=source,
        labels=dict(labels or {}),
        started_at=started_at,
        meta=dict(meta or {}),
    )
