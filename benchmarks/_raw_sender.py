"""A sender with exact write times, for measuring the measurer (bench_fidelity.py --sender raw).

    python benchmarks/_raw_sender.py --port 8123 --tokens 200 --cadence-ms 50 --record truth.jsonl

An OpenAI-compatible streaming endpoint reduced to its timing: every open stream gets one
content event on each global tick (like a batched engine writing every sequence's token on
the same step), then a usage event and ``[DONE]``. Each write is a blocking ``send`` on a
plain socket, stamped with ``perf_counter_ns`` the moment the call returns, so the recorded
write time is the write, not when an event loop got round to it (the lab stamps after its
ASGI send returns, which on a busy machine can be late by the time the woken reader runs).

Each finished stream is appended to ``--record`` as one JSON line:
``{"request_id": ..., "written_ns": [...], "started_ns": [...]}`` (content events only,
perf_counter_ns when each send returned and just before it began: on a busy machine the
sender can be descheduled on either side of the call, so the write lies in between).
``GET /healthz`` answers 200. Requests are parsed with httptools.
"""

from __future__ import annotations

import argparse
import json
import selectors
import signal
import socket
import time
from pathlib import Path
from typing import TextIO

import httptools

from steadystream.protocol import DONE, chat_chunk, encode_chunk, usage_chunk

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: close\r\n\r\n"
)
HEALTHY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
READ_LIMIT = 1 << 20


def framed(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Incoming:
    """One connection until its request is read (httptools calls back into it)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.parser = httptools.HttpRequestParser(self)
        self.request_id = ""
        self.complete = False
        self.size = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"x-request-id":
            self.request_id = value.decode("latin-1")

    def on_message_complete(self) -> None:
        self.complete = True


class Stream:
    def __init__(self, sock: socket.socket, request_id: str) -> None:
        self.sock = sock
        self.request_id = request_id
        self.written: list[int] = []
        self.started: list[int] = []  # just before each send: the write lies in between


def serve(port: int, tokens: int, cadence_ns: int, record: Path) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4096)
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    streams: list[Stream] = []
    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    event = framed(encode_chunk(chat_chunk("c", "raw", 0, content="tok ")))
    ending = framed(
        encode_chunk(
            usage_chunk(
                "c",
                "raw",
                0,
                object_name="chat.completion.chunk",
                prompt_tokens=1,
                completion_tokens=tokens,
            )
        )
    ) + framed(DONE)
    ending += b"0\r\n\r\n"
    next_tick = time.perf_counter_ns() + cadence_ns
    with record.open("a") as out:
        while running:
            timeout = max(0.0, (next_tick - time.perf_counter_ns()) / 1e9)
            for key, _ in selector.select(timeout):
                if key.fileobj is listener:
                    accept(listener, selector)
                    continue
                incoming: Incoming = key.data
                ready = read(incoming)
                if ready is None:
                    continue
                selector.unregister(incoming.sock)
                if ready is True:
                    incoming.sock.setblocking(True)
                    incoming.sock.sendall(HEAD)
                    streams.append(Stream(incoming.sock, incoming.request_id))
            if time.perf_counter_ns() < next_tick:
                continue
            next_tick += cadence_ns
            streams = tick(streams, event, ending, tokens, out)
    for stream in streams:
        stream.sock.close()


def accept(listener: socket.socket, selector: selectors.BaseSelector) -> None:
    while True:
        try:
            sock, _ = listener.accept()
        except BlockingIOError:
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        selector.register(sock, selectors.EVENT_READ, Incoming(sock))


def read(incoming: Incoming) -> bool | None:
    """True: a streaming request is complete; False: answered or dropped; None: more to read."""
    try:
        data = incoming.sock.recv(65536)
    except BlockingIOError:
        return None
    incoming.size += len(data)
    if data:
        try:
            incoming.parser.feed_data(data)
        except httptools.HttpParserError:
            data = b""
    if not data or incoming.size > READ_LIMIT:
        incoming.sock.close()
        return False
    if not incoming.complete:
        return None
    if incoming.parser.get_method() == b"GET":
        incoming.sock.setblocking(True)
        incoming.sock.sendall(HEALTHY)
        incoming.sock.close()
        return False
    return True


def tick(
    streams: list[Stream], event: bytes, ending: bytes, tokens: int, out: TextIO
) -> list[Stream]:
    alive = []
    for stream in streams:
        try:
            before = time.perf_counter_ns()
            stream.sock.sendall(event)
            stream.written.append(time.perf_counter_ns())  # the write, stamped as it returns
            stream.started.append(before)
            if len(stream.written) < tokens:
                alive.append(stream)
                continue
            stream.sock.sendall(ending)
        except OSError:
            pass
        stream.sock.close()
        line = {
            "request_id": stream.request_id,
            "written_ns": stream.written,
            "started_ns": stream.started,
        }
        out.write(json.dumps(line) + "\n")
        out.flush()
    return alive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--cadence-ms", type=float, default=50.0)
    parser.add_argument("--record", type=Path, required=True)
    args = parser.parse_args()
    serve(args.port, args.tokens, int(args.cadence_ms * 1e6), args.record)


if __name__ == "__main__":
    main()
