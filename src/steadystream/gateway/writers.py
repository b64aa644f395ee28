"""The client side of a stream: take from the buffer, write to the client, stamp each write.

Two writers. :func:`write_raw` sends what the buffer holds, the upstream's bytes as they came
(the line already cut them at event boundaries): no parse, no copy, one ASGI send per
upstream read; while the client keeps up the line writes each read itself
(:meth:`RawOutlet.try_write`) and the buffer stays empty.
:func:`write_paced` runs the events through the shaping package's live driver
(:func:`steadystream.shaping.pace`) and re-encodes the paced text; events a pacer does not
hold (role, tool calls, finish, usage, keepalives, errors) keep their original bytes.

Every write is stamped right after the server took it: that is the ``gateway-downstream``
time of the events in it. Each write is also reported to the stuck-client rule. Writers see
the stream's :class:`~steadystream.gateway.context.StreamContext`, never the relay.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable

from starlette.types import Send

from steadystream._types import Event, EventKind, Outcome
from steadystream._uvicorn import frame
from steadystream.gateway.context import Out, StreamContext
from steadystream.gateway.events import ChunkFormat, Piece
from steadystream.protocol.sse import DONE
from steadystream.shaping import Pacer, pace
from steadystream.shaping.base import is_paced
from steadystream.timeline import estimate_tokens

__all__ = ["RawOutlet", "unsent_bytes", "write_paced", "write_raw"]

_PACED_KINDS = (EventKind.CONTENT, EventKind.REASONING)

try:
    import fcntl
    import termios

    _TIOCOUTQ: int | None = termios.TIOCOUTQ
except (ImportError, AttributeError):  # not on this platform: the transport's buffer only
    _TIOCOUTQ = None

_log = logging.getLogger("steadystream.gateway")


def unsent_bytes(transport: asyncio.WriteTransport | None) -> int | None:
    """Bytes the client's connection holds that the client has not taken (None: not known).

    The transport's own buffer moves only when the kernel frees a third of its send buffer,
    seconds apart for a slow reader; the kernel's send queue (``TIOCOUTQ``, on Linux) falls
    with every window the client opens by reading. Both together show a slow reader reading.
    """
    if transport is None:
        return None
    unsent = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if _TIOCOUTQ is not None and sock is not None:
        try:
            queued = fcntl.ioctl(sock.fileno(), _TIOCOUTQ, b"\0\0\0\0")
        except (OSError, ValueError):  # closed, or not a socket the kernel can tell about
            return unsent
        unsent += int.from_bytes(queued, sys.byteorder, signed=True)
    return unsent


class RawOutlet:
    """Sends the upstream's bytes to the client, one read at a time, and stamps each send.

    The writer task delivers what the buffer holds (:meth:`deliver`, through the server's
    ``send``). The line writes a read itself when nothing is queued or being sent and the
    client's connection has nothing left unsent (:meth:`try_write`): such a write cannot
    wait for the client, and skipping the hop through the writer task sends each event right
    after its read instead of after the whole burst of reads the event loop is working
    through (a step of a batching engine writes every stream at once). ``busy`` keeps the
    two from sending at the same time.
    """

    __slots__ = (
        "_clock",
        "_ctx",
        "_log",
        "_received",
        "_scrub",
        "_send",
        "_stuck",
        "busy",
        "chunks",
        "transport",
    )

    def __init__(
        self,
        ctx: StreamContext,
        send: Send,
        transport: asyncio.WriteTransport | None,
        *,
        chunks: bool = False,
    ) -> None:
        self._ctx = ctx
        self.transport = transport
        self._send = send
        self._clock = ctx.clock
        self._stuck = ctx.stuck
        self._log = ctx.record.downstream
        self._received = ctx.record.received_ns
        self._scrub = ctx.scrub
        self.busy = False
        # The server frames this response in HTTP/1.1 chunks and lets frames be written to
        # its transport between its own sends (uvicorn's httptools protocol): try_write.
        self.chunks = chunks and transport is not None

    def try_write(self, out: Out) -> bool:
        """Write ``out`` to the client now, as one chunk, and record it; False when that
        cannot be done without waiting or reordering (the caller buffers it).

        Only where the server frames chunks that may be written between its own sends,
        nothing is being sent, and the client's connection holds nothing unsent.
        """
        transport = self.transport
        if (
            not self.chunks
            or self.busy
            or transport is None
            or transport.is_closing()
            or transport.get_write_buffer_size()
        ):
            return False
        data = out.data
        body = data if self._scrub is None else self._scrub(data)
        transport.write(frame(body))
        self.sent(out, self._clock.now_ns())
        return True

    async def deliver(self, out: Out) -> int:
        """Send ``out``; returns the clock reading right after the server took it."""
        clock = self._clock
        self.busy = True
        try:
            self._stuck.sending(clock.now_ns())
            body = out.data if self._scrub is None else self._scrub(out.data)
            await self._send({"type": "http.response.body", "body": body, "more_body": True})
            now = clock.now_ns()
        finally:
            self.busy = False
        self._stuck.sent()
        self.sent(out, now)
        return now

    def sent(self, out: Out, now: int) -> None:
        """Record that ``out`` went to the client at ``now`` (the ``gateway-downstream`` edge)."""
        t = now - self._received
        log = self._log
        if log.first_byte_ns is None:
            log.first_byte_ns = t
        for piece in out.pieces:
            log.add(t, piece)
        if out.pieces[-1].kind is None:
            # [DONE] went out: the answer is whole, whatever the client does next.
            self._ctx.answered = True


async def write_raw(ctx: StreamContext, outlet: RawOutlet) -> None:
    """Forward the buffer's bytes unchanged."""
    buffer = ctx.buffer
    while (out := await buffer.get()) is not None:
        await outlet.deliver(out)


async def write_paced(
    ctx: StreamContext,
    send: Send,
    pacer: Pacer,
    *,
    chat: bool,
    high_watermark: int,
    low_watermark: int,
    stamp: Callable[[bytes], bytes] | None = None,
) -> None:
    """Release text as the stream's pacer says; everything else in order, unchanged.

    ``stamp`` (with resume) gives each event it sends its ``id:`` and keeps it: paced
    events are the ones the client gets, so they are the ones numbered.
    """
    chunks = ChunkFormat(chat=chat)
    held: deque[Piece] = deque()  # pieces the pacer passes through, in their order
    events = _events(ctx, chunks, held)
    paced = pace(
        events, pacer, ctx.clock, high_watermark=high_watermark, low_watermark=low_watermark
    )
    try:
        await _write_paced(ctx, send, paced, chunks, held, stamp)
    except Exception as exc:  # (a fault of ours mid-stream: never a silent end)
        await _failed(ctx, send, exc, stamp)


async def _write_paced(
    ctx: StreamContext,
    send: Send,
    paced: AsyncIterator[Event],
    chunks: ChunkFormat,
    held: deque[Piece],
    stamp: Callable[[bytes], bytes] | None,
) -> None:
    clock = ctx.clock
    stuck = ctx.stuck
    log = ctx.record.downstream
    received = ctx.record.received_ns
    scrub = ctx.scrub
    async for event in paced:
        if is_paced(event):
            chunks.envelope = ctx.envelope
            raw = chunks.text(event.kind, event.text)
            piece = Piece(event.kind, event.text, raw, len(raw))
        else:
            piece = held.popleft()
            if not piece.raw:
                continue
        stuck.sending(clock.now_ns())
        body = piece.raw if scrub is None else scrub(piece.raw)
        if stamp is not None:
            body = stamp(body)
        await send({"type": "http.response.body", "body": body, "more_body": True})
        t = clock.now_ns() - received
        stuck.sent()
        if log.first_byte_ns is None:
            log.first_byte_ns = t
        log.add(t, piece)
        if piece.kind is None or piece.raw.endswith(DONE):
            ctx.answered = True  # the answer is whole, whatever the client does next


async def _failed(
    ctx: StreamContext, send: Send, exc: Exception, stamp: Callable[[bytes], bytes] | None
) -> None:
    """The paced writer failed: the client is told in the stream, and the rest of what the
    relay hands over is let go (the relay goes on to its end, never blocked on a full
    buffer)."""
    record = ctx.record
    message = f"the gateway failed: {type(exc).__name__}"
    _log.error("request %s: the paced writer failed", record.request_id, exc_info=exc)
    record.outcome = Outcome.ERROR
    record.error = message
    data = ChunkFormat.error(message, "internal")
    await send(
        {
            "type": "http.response.body",
            "body": data if stamp is None else stamp(data),
            "more_body": True,
        }
    )
    record.downstream.add(
        ctx.clock.now_ns() - record.received_ns, Piece(EventKind.ERROR, "", data, len(data))
    )
    ctx.answered = True
    while await ctx.buffer.get() is not None:
        pass


async def _events(
    ctx: StreamContext, chunks: ChunkFormat, held: deque[Piece]
) -> AsyncIterator[Event]:
    """The buffer's pieces as events for the pacer: text is paced, the rest passes through."""
    buffer = ctx.buffer
    clock = ctx.clock
    scrub = ctx.scrub
    last_usage = 0
    while (out := await buffer.get()) is not None:
        now = clock.now_ns()
        for piece in out.pieces:
            kind = piece.kind
            if kind in _PACED_KINDS and piece.text:
                if piece.usage >= 0:
                    tokens = max(1, piece.usage - last_usage)
                    last_usage = piece.usage
                else:
                    tokens = estimate_tokens(piece.text)
                text = piece.text
                if scrub is not None:
                    # A pacer may cut the text anywhere: hide a key before it can be cut.
                    text = scrub(text.encode()).decode()
                yield Event(now, text, tokens, kind, piece.wire)
                if piece.finish is None and piece.usage < 0:
                    continue
                # The finish reason (or usage) of the chunk goes out after its paced text.
                rest = ChunkFormat.without_text(piece)
                piece = piece._replace(kind=EventKind.EMPTY, text="", raw=rest)
            elif kind is EventKind.ROLE:
                chunks.role_seen()
            held.append(piece)
            yield Event(now, "", 0, piece.kind or EventKind.EMPTY)
