"""OpenAI-compatible streams as timelines: the recorder the load generator and gateway use.

:class:`StreamRecorder` turns live reads of a streamed response body into a
:class:`Timeline`, on the load generator's and the gateway's hot paths: per event it appends
to typed arrays and classifies one payload (:func:`parse_chunk`); numpy arrays are built
once, in :meth:`StreamRecorder.finish`. :func:`timeline_from_sse` does the same for reads
recorded earlier. The chunk API of :mod:`steadystream.protocol.chunks` is re-exported here,
so ``steadystream.protocol.openai`` is the one place for OpenAI-compatible streaming.

Every event a read completes is stamped with that read's arrival: that is when the bytes
could first have reached a user. Keepalive comments and named events the chunk protocol
does not use (``event: ping``) are kept as KEEPALIVE events with no tokens, so that pauses
filled by keepalives still show, and their bytes count toward the envelope overhead.

How a stream ends:

- ``[DONE]`` marks it complete; its time is the timeline's ``end_ns``. Real engines may end
  the body with ``data: [DONE]`` and no blank line; the SSE rules discard that unfinished
  event, but the recorder treats the stream as complete (ending at the last read), because
  the server did say it was done and nothing was lost.
- An error event (SSE ``event: error``, or an error payload) makes the outcome ERROR with
  the server's message. A payload that cannot be parsed does the same, with the parse
  error as the message, recorded as an ERROR event. Either ends the recording; events
  before it are kept.
- A stream that stops without ``[DONE]`` and without a finish reason is TRUNCATED (the
  timeline's ``error`` says so, and whether it was cut mid-event), unless the caller says
  how it ended, for example CANCELLED.
- Bytes after the end are still decoded and returned by :meth:`StreamRecorder.feed` (a
  gateway forwards them) but not recorded.

Token counts: when chunks carry their own running usage (vLLM's continuous usage stats),
each event gets the growth of ``completion_tokens`` since the previous one (EXACT);
otherwise :func:`steadystream.timeline.assign_tokens` spreads the final usage total over the
text events (pieces of one token sharing it when there are more events than tokens). With no
usage, a stream that ended with ``finish_reason: "length"`` carried exactly the request's
``max_tokens``, when the recorder was told it (``max_tokens=``); otherwise the counts are
estimated from the text. ``Timeline.token_source`` says which rule applied.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from steadystream._exceptions import ProtocolError
from steadystream._types import EventKind, Nanos, Outcome, TokenSource, Where
from steadystream.protocol.chat import chat_dialect
from steadystream.protocol.chunks import (
    Chunk,
    chat_chunk,
    classify_chunk,
    completion_chunk,
    encode_chunk,
    error_payload,
    is_done,
    parse_chunk,
    usage_chunk,
)
from steadystream.protocol.dialect import Decoded, Dialect
from steadystream.protocol.sse import SseDecoder, SseItem, new_decoder
from steadystream.timeline import Timeline, assign_tokens, is_text_kind

__all__ = [
    "Chunk",
    "StreamRecorder",
    "chat_chunk",
    "classify_chunk",
    "completion_chunk",
    "encode_chunk",
    "error_payload",
    "is_done",
    "parse_chunk",
    "timeline_from_sse",
    "usage_chunk",
]

_NO_USAGE = -1  # completion_tokens slot of an event whose chunk carried no usage


class StreamRecorder:
    """Records one live stream into a :class:`Timeline`, read by read.

    Times passed in are on the caller's monotonic clock; ``sent_ns`` is when the request was
    sent on that clock and is subtracted, so the timeline holds offsets from request sent
    (pass offsets and leave it 0 if you already have them). ``max_tokens`` is the request's,
    when known: with no usage, a stream that ends for length is counted as exactly that many
    tokens (``token_source`` ``max-tokens``) instead of an estimate from its text.
    """

    __slots__ = (
        "_decoder",
        "_dialect",
        "_done",
        "_end_ns",
        "_ended",
        "_error",
        "_finish_reason",
        "_finished",
        "_first_byte_ns",
        "_header_ns",
        "_keep_text",
        "_kinds",
        "_labels",
        "_last_read_ns",
        "_max_tokens",
        "_sent_ns",
        "_started_at",
        "_stream_id",
        "_text_bytes",
        "_texts",
        "_times",
        "_usage",
        "_usage_tokens",
        "_where",
        "_wire",
    )

    def __init__(
        self,
        stream_id: str,
        where: Where | str,
        *,
        keep_text: bool = False,
        labels: Mapping[str, str] | None = None,
        started_at: float | None = None,
        sent_ns: Nanos = 0,
        max_tokens: int | None = None,
        dialect: Dialect | None = None,
    ) -> None:
        self._stream_id = stream_id
        # The request's max_tokens: a stream that stops for length without usage made them.
        self._max_tokens = max_tokens
        self._where = Where(where)
        self._keep_text = keep_text
        self._labels = dict(labels or {})
        self._started_at = started_at
        self._sent_ns = sent_ns
        self._decoder: SseDecoder = new_decoder()  # the one SSE cut, compiled where built
        # What each event is: chat's unless told (protocol/apis.py has one for every API).
        self._dialect: Dialect = dialect if dialect is not None else chat_dialect()
        self._times = array("q")
        self._kinds = array("B")
        self._wire = array("i")
        self._text_bytes = array("i")
        self._usage_tokens = array("q")  # running completion_tokens per event, or _NO_USAGE
        # Texts are kept while recording even when not stored: with no usage, the token
        # estimate reads them.
        self._texts: list[str] = []
        self._header_ns: Nanos | None = None
        self._first_byte_ns: Nanos | None = None
        self._last_read_ns: Nanos | None = None
        self._end_ns: Nanos | None = None
        self._done = False
        self._ended = False  # [DONE], an error or a bad payload: later events are not kept
        self._finished = False
        self._error: str | None = None
        self._finish_reason: str | None = None
        self._usage: dict[str, int] | None = None

    @property
    def ended(self) -> bool:
        """True once the stream said it is over ([DONE], an error, a bad payload)."""
        return self._ended

    @property
    def finished(self) -> bool:
        """True once the stream gave a finish reason (the answer is whole; its end may follow)."""
        return self._finish_reason is not None

    @property
    def decoder(self) -> SseDecoder:
        return self._decoder

    def headers(self, now_ns: Nanos) -> None:
        """Note when the response headers arrived."""
        self._header_ns = now_ns - self._sent_ns

    def reconnected(self) -> None:
        """The stream goes on over a new connection (a resumed stream): an event the old
        connection cut short is dropped, never joined to the new one's bytes; the server
        sends it again whole."""
        self._decoder = new_decoder()

    def feed(self, now_ns: Nanos, data: bytes) -> list[SseItem]:
        """Record one read that arrived at ``now_ns``; return the SSE items it completed.

        Every event the read completed is stamped with ``now_ns``.
        """
        if self._finished:
            raise RuntimeError("feed() after finish(): the stream has been recorded")
        if not data:
            return []
        t = now_ns - self._sent_ns
        if self._first_byte_ns is None:
            self._first_byte_ns = t
        self._last_read_ns = t
        items = self._decoder.feed(data)
        for item in items:
            if self._ended:
                break
            self._record(t, item)
        return items

    def finish(
        self, now_ns: Nanos, *, outcome: Outcome | str | None = None, error: str | None = None
    ) -> Timeline:
        """End the recording at ``now_ns`` (the end of the body) and build the timeline.

        ``outcome`` and ``error``, when given, override what the stream itself said.
        """
        if self._finished:
            raise RuntimeError("finish() was already called")
        self._finished = True
        t = now_ns - self._sent_ns
        self._decoder.close()
        leftover = self._decoder.incomplete_event
        if (
            not self._ended
            and leftover is not None
            and leftover.event == "message"
            and is_done(leftover.data)
        ):
            self._done = self._ended = True
            self._end_ns = self._last_read_ns
        final_error = error if error is not None else self._error
        if outcome is not None:
            final = Outcome(outcome)
        elif self._error is not None:
            final = Outcome.ERROR
        elif self._done or self._finish_reason is not None:
            final = Outcome.COMPLETE
        else:
            final = Outcome.TRUNCATED
            if final_error is None:
                # (The typed dialects name their own end; chat's is [DONE] or a finish.)
                end = getattr(self._dialect, "END", "[DONE] or a finish reason")
                final_error = f"stream ended without {end}"
                if self._decoder.in_event:
                    cut = self._decoder.undispatched_bytes
                    final_error += f", cut mid-event ({cut} bytes undispatched)"
        kinds = np.frombuffer(self._kinds, dtype=np.uint8).copy()
        text_bytes = np.frombuffer(self._text_bytes, dtype=np.int32).copy()
        tokens, source = self._tokens(kinds, text_bytes)
        return Timeline(
            stream_id=self._stream_id,
            where=self._where,
            times=np.frombuffer(self._times, dtype=np.int64).copy(),
            tokens=tokens,
            wire_bytes=np.frombuffer(self._wire, dtype=np.int32).copy(),
            text_bytes=text_bytes,
            kinds=kinds,
            texts=self._texts if self._keep_text else None,
            header_ns=self._header_ns,
            first_byte_ns=self._first_byte_ns,
            end_ns=self._end_ns if self._end_ns is not None else t,
            outcome=final,
            error=final_error,
            usage=self._usage,
            token_source=source,
            labels=self._labels,
            started_at=self._started_at,
        )

    def _record(self, t: Nanos, item: SseItem) -> None:
        try:
            decoded = self._dialect.decode(item)
        except ProtocolError as exc:
            decoded = Decoded(EventKind.ERROR, error=str(exc))
        kind = decoded.kind
        if kind is None:  # [DONE]: the end of the answer, not an event
            self._done = self._ended = True
            self._end_ns = t
            # (Responses ends with its final response: its finish and usage are kept.)
            if decoded.finish is not None:
                self._finish_reason = decoded.finish
            if decoded.usage_counts is not None:
                self._usage = decoded.usage_counts
            return
        self._append(t, kind, decoded.text, item.wire_bytes, decoded.usage)
        if decoded.finish is not None:
            self._finish_reason = decoded.finish
        if decoded.usage_counts is not None:
            self._usage = decoded.usage_counts
        if kind is EventKind.ERROR:
            self._error = decoded.error
            self._ended = True
            self._end_ns = t

    def _append(self, t: Nanos, kind: EventKind, text: str, wire: int, running: int) -> None:
        self._times.append(t)
        self._kinds.append(kind)
        self._wire.append(wire)
        self._text_bytes.append(len(text) if text.isascii() else len(text.encode()))
        self._texts.append(text)
        self._usage_tokens.append(running)

    def _tokens(
        self, kinds: npt.NDArray[np.uint8], text_bytes: npt.NDArray[np.int32]
    ) -> tuple[npt.NDArray[np.int32], TokenSource]:
        running = np.frombuffer(self._usage_tokens, dtype=np.int64)
        text_events = is_text_kind(kinds) & (text_bytes > 0)
        if text_events.any() and (running[text_events] >= 0).all():
            counted = running >= 0
            tokens = np.zeros(len(kinds), dtype=np.int32)
            tokens[counted] = np.diff(running[counted], prepend=0)
            # Trust the counter only if it never goes back and every chunk the user saw
            # made a token; otherwise metrics would drop text events or count negatives.
            if (tokens >= 0).all() and (tokens[text_events] >= 1).all():
                return tokens, TokenSource.EXACT
        total = self._usage.get("completion_tokens") if self._usage is not None else None
        at_limit = self._max_tokens if self._finish_reason == "length" else None
        return assign_tokens(
            kinds,
            text_bytes,
            texts=self._texts,
            usage_completion_tokens=total,
            stopped_at_max_tokens=at_limit,
        )


def timeline_from_sse(
    reads: Iterable[tuple[Nanos, bytes]],
    *,
    stream_id: str,
    where: Where | str = Where.CLIENT,
    keep_text: bool = False,
    header_ns: Nanos | None = None,
    labels: Mapping[str, str] | None = None,
    started_at: float | None = None,
    outcome: Outcome | str | None = None,
    sent_ns: Nanos = 0,
    max_tokens: int | None = None,
    dialect: Dialect | None = None,
) -> Timeline:
    """Build a timeline from recorded ``(arrival_ns, bytes)`` reads of an SSE body.

    Each event is stamped with the arrival of the read that completed it; the stream ends at
    the last read (a final ``(t, b"")`` read marks a later end of body). ``max_tokens`` and
    ``dialect`` are as for :class:`StreamRecorder`.
    """
    recorder = StreamRecorder(
        stream_id,
        where,
        keep_text=keep_text,
        labels=labels,
        started_at=started_at,
        sent_ns=sent_ns,
        max_tokens=max_tokens,
        dialect=dialect,
    )
    end = sent_ns
    if header_ns is not None:
        recorder.headers(header_ns)
        end = header_ns
    for arrival_ns, data in reads:
        recorder.feed(arrival_ns, data)
        end = arrival_ns
    return recorder.finish(end, outcome=outcome)
