"""The TLS upstream path against a hostile server: each test decides which TLS bytes go out.

The server speaks TLS over memory buffers too, so a test can cut a record, send a
close_notify and keep the socket open, put bytes that are not TLS behind real records, or
send a fatal alert. Every test runs on both builds of the relay (tests/stamped/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from steadystream._clock import MonotonicClock
from steadystream._exceptions import UpstreamConnectError, UpstreamStreamError
from steadystream.stamped import StampMode, Target, tls
from steadystream.stamped.connection import connection_type
from tests.support.scripted import SSE_HEAD, chunked, exchange
from tests.support.tls import self_signed

CLOSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"  # close-delimited
SECRET = b"SERVER-SECRET-BYTES"  # bytes of a hostile server that no message may show


class Peer:
    """The server's side of one TLS connection, over memory buffers: the test sends what it
    wants, when, with ``sock.sendall``."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("the client left during the handshake") from None
                self.incoming.write(data)
        self.sock.sendall(self.outgoing.read())  # (TLS 1.3: the tickets)

    def request(self) -> bytes:
        request = b""
        while b"\r\n\r\n" not in request:
            try:
                request += self.tls.read(65536)
            except ssl.SSLWantReadError:
                self.incoming.write(self.sock.recv(65536))
        return request

    def records(self, plaintext: bytes, size: int = 1 << 14) -> bytes:
        """``plaintext`` as records of ``size`` bytes at most (not sent)."""
        for at in range(0, len(plaintext), size):
            self.tls.write(plaintext[at : at + size])
        return self.outgoing.read()

    def close_notify(self) -> bytes:
        with contextlib.suppress(ssl.SSLWantReadError):  # (it waits for the client's)
            self.tls.unwrap()
        return self.outgoing.read()

    def alert(self) -> bytes:
        """A fatal alert (bad record MAC), as the server sends it for a forged record."""
        self.incoming.write(b"\x17\x03\x03\x00\x20" + b"\0" * 32)
        with pytest.raises(ssl.SSLError):
            self.tls.read(1024)
        return self.outgoing.read()

    def reset(self) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


Script = Callable[[Peer], None]


class Server:
    """Accepts on 127.0.0.1 and runs one script per connection, each with its own context
    (a new context is a server whose ticket keys are new)."""

    def __init__(self, *scripts: tuple[ssl.SSLContext, Script]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10.0)
        self.port: int = self.listener.getsockname()[1]
        self.resumed: list[bool] = []
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._serve, args=(scripts,), daemon=True)
        self._thread.start()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}/v1/chat/completions"

    def _serve(self, scripts: tuple[tuple[ssl.SSLContext, Script], ...]) -> None:
        for context, script in scripts:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            try:
                peer = Peer(sock, context)
                self.resumed.append(peer.tls.session_reused)
                peer.request()
                script(peer)
            except (OSError, ssl.SSLError, ConnectionError) as exc:
                self.errors.append(exc)
            finally:
                sock.close()

    def close(self) -> None:
        self.listener.close()
        self._thread.join(timeout=10.0)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Two servers' certificates for 127.0.0.1, and one for another name only."""
    folder = tmp_path_factory.mktemp("tls")
    made = {
        "first": self_signed(folder, "first", "IP:127.0.0.1"),
        "second": self_signed(folder, "second", "IP:127.0.0.1"),
        "elsewhere": self_signed(folder, "elsewhere", "DNS:upstream.invalid"),
    }
    both = folder / "both.pem"
    both.write_bytes(made["first"][0].read_bytes() + made["second"][0].read_bytes())
    made["both"] = (both, both)
    return made


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(*scripts: tuple[ssl.SSLContext, Script]) -> Server:
        servers.append(Server(*scripts))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def server_context(cert: tuple[Path, Path], *, tickets: bool = True) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*cert)
    if not tickets:
        context.num_tickets = 0
    return context


def client_context(cert: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert[0]))


def run(url: str, context: ssl.SSLContext | None, read_timeout_s: float = 5.0) -> bytes:
    _, _, pieces = asyncio.run(
        exchange(url, StampMode.USER, read_timeout_s=read_timeout_s, ssl_context=context)
    )
    return b"".join(data for _, data in pieces)


def held_open(peer: Peer) -> None:
    """The server keeps its socket open after its close_notify, until the client leaves."""
    peer.sock.settimeout(5.0)
    while peer.sock.recv(65536):  # the client's close_notify, then its end
        pass


EVENT = chunked(b"data: 1\n\n")
DONE = chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"


# -- the end of the stream -----------------------------------------------------------------


def test_a_close_notify_inside_an_event_fails_the_stream_at_once(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    """Failed before: the close_notify was read as nothing, and with the socket held open
    the reader waited for the read timeout, and then blamed it."""
    cert = certificates["first"]

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(SSE_HEAD + EVENT + b"9\r\ndata: 2"))
        peer.sock.sendall(peer.close_notify())
        held_open(peer)

    server = serve((server_context(cert), script))
    # The server holds its socket open past the read timeout: a close_notify read as nothing
    # would end in "read timed out", not in this error.
    with pytest.raises(UpstreamStreamError, match="closed the connection before the body ended"):
        run(server.url(), client_context(cert), read_timeout_s=4.0)


def test_a_close_notify_ends_a_close_delimited_body_at_once(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    cert = certificates["first"]
    body = b"data: 1\n\ndata: [DONE]\n\n"

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(CLOSE_HEAD + body))
        peer.sock.sendall(peer.close_notify())
        held_open(peer)

    server = serve((server_context(cert), script))
    # (held open past the read timeout: a close_notify not taken as the end would time out)
    assert run(server.url(), client_context(cert), read_timeout_s=4.0) == body


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_a_reset_right_after_the_close_notify_behind_done(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]], framing: str
) -> None:
    """Failed before (a close-delimited body): the close_notify was not the end, the reset
    behind it was, and a whole answer was reported lost mid-stream."""
    cert = certificates["first"]
    answer = SSE_HEAD + EVENT + DONE if framing == "chunked" else CLOSE_HEAD + b"data: [DONE]\n\n"

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(answer))
        time.sleep(0.05)  # (the client reads the answer, then the end, in two reads)
        peer.sock.sendall(peer.close_notify())
        peer.reset()

    server = serve((server_context(cert), script))
    body = run(server.url(), client_context(cert))
    assert body.endswith(b"data: [DONE]\n\n")


def test_a_record_cut_by_the_end_of_the_connection_is_a_truncation(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    """Failed before: a close-delimited body ends with the socket, and the socket ended
    inside a record, whose bytes were silently lost: a cut answer read as a whole one."""
    cert = certificates["first"]

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(CLOSE_HEAD + b"data: 1\n\n"))
        time.sleep(0.05)
        peer.sock.sendall(peer.records(b"data: [DONE]\n\n")[:-4])

    server = serve((server_context(cert), script))
    with pytest.raises(UpstreamStreamError, match="TLS record was cut short"):
        run(server.url(), client_context(cert))


def test_an_end_between_records_without_a_close_notify_ends_a_close_delimited_body(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    # Many servers close without a close_notify; between records nothing was lost.
    cert = certificates["first"]
    header = b"data: 1\n\n" * 3

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(CLOSE_HEAD + header, size=7))

    server = serve((server_context(cert), script))
    assert run(server.url(), client_context(cert)) == header


# -- bytes that are not what they claim ----------------------------------------------------


def test_bytes_that_are_not_tls_behind_records_fail_after_the_records_plaintext(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    """Failed before: the plaintext of the records in the same read was dropped with the
    failure, and the message carried OpenSSL's source line."""
    cert = certificates["first"]

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(SSE_HEAD + EVENT) + b"HTTP/1.1 " + SECRET)
        held_open(peer)

    server = serve((server_context(cert), script))
    pieces: list[bytes] = []
    with pytest.raises(UpstreamStreamError) as raised:
        asyncio.run(collect(server.url(), client_context(cert), pieces))
    message = str(raised.value)
    assert "not TLS records" in message
    assert "SERVER-SECRET" not in message
    assert "_ssl.c" not in message
    assert b"".join(pieces) == b"data: 1\n\n"


def test_a_record_header_claiming_more_than_a_record_holds(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    cert = certificates["first"]

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(SSE_HEAD + EVENT))
        time.sleep(0.05)
        peer.sock.sendall(b"\x17\x03\x03\xff\xff" + SECRET * 100)
        held_open(peer)

    server = serve((server_context(cert), script))
    with pytest.raises(UpstreamStreamError, match="packet length too long") as raised:
        run(server.url(), client_context(cert), read_timeout_s=4.0)
    assert "SERVER-SECRET" not in str(raised.value)


def test_a_fatal_alert_mid_stream_is_named(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    cert = certificates["first"]

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(SSE_HEAD + EVENT) + peer.alert())
        held_open(peer)

    server = serve((server_context(cert), script))
    pieces: list[bytes] = []
    with pytest.raises(UpstreamStreamError, match="the server sent a TLS alert: bad record mac"):
        asyncio.run(collect(server.url(), client_context(cert), pieces, read_timeout_s=4.0))
    assert b"".join(pieces) == b"data: 1\n\n"


def test_bytes_that_are_not_tls_in_the_handshake(
    certificates: dict[str, tuple[Path, Path]],
) -> None:
    """A plain HTTP server on the TLS port: named, and its words not echoed."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        peer, _ = listener.accept()
        with peer:
            peer.recv(65536)
            peer.sendall(b"HTTP/1.1 400 " + SECRET + b"\r\n\r\n")
            time.sleep(0.2)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{listener.getsockname()[1]}/v1/chat/completions"
    try:
        with pytest.raises(UpstreamConnectError, match="not TLS records") as raised:
            run(url, client_context(certificates["first"]))
    finally:
        thread.join(timeout=5.0)
        listener.close()
    assert "SERVER-SECRET" not in str(raised.value)


def test_a_reset_during_the_handshake_is_a_connect_error(
    certificates: dict[str, tuple[Path, Path]],
) -> None:
    """Failed before: the reset left open() as a bare ConnectionResetError."""
    listener = socket.create_server(("127.0.0.1", 0))

    def cut() -> None:
        peer, _ = listener.accept()
        peer.recv(65536)  # the client hello
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()

    thread = threading.Thread(target=cut, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{listener.getsockname()[1]}/v1/chat/completions"
    try:
        with pytest.raises(UpstreamConnectError, match=r"broke during the handshake: .*reset"):
            run(url, client_context(certificates["first"]))
    finally:
        thread.join(timeout=5.0)
        listener.close()


async def collect(
    url: str, context: ssl.SSLContext, pieces: list[bytes], read_timeout_s: float = 5.0
) -> None:
    conn = await connection_type().open(
        Target.from_url(url),
        MonotonicClock(),
        StampMode.USER,
        read_timeout_s=read_timeout_s,
        ssl_context=context,
    )
    try:
        await conn.send("POST", {}, b"{}")

        def sink(_stamp: int, data: bytes) -> bool:
            pieces.append(data)
            return False

        await conn.stream_body(sink)
    finally:
        conn.close()


# -- records of odd sizes ------------------------------------------------------------------


def test_a_whole_answer_in_one_record_with_its_close_notify(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    cert = certificates["first"]
    events = b"".join(chunked(b"data: %d\n\n" % i) for i in range(50))

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(SSE_HEAD + events + DONE) + peer.close_notify())

    server = serve((server_context(cert), script))
    body = run(server.url(), client_context(cert))
    assert body.startswith(b"data: 0\n\n")
    assert body.endswith(b"data: [DONE]\n\n")


def test_a_record_per_byte(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    """~50 KB of plaintext as ~50,000 records (over a megabyte of ciphertext): read in
    linear time, and the few slow ones at the end (sent a second apart) are not a hang."""
    cert = certificates["first"]
    events = b"".join(chunked(b"data: %05d\n\n" % i) for i in range(2500))

    def script(peer: Peer) -> None:
        peer.sock.sendall(peer.records(SSE_HEAD + events, size=1))
        for byte in DONE:
            peer.sock.sendall(peer.records(bytes([byte])))
            time.sleep(0.01)
        peer.sock.sendall(peer.close_notify())

    server = serve((server_context(cert), script))
    body = run(server.url(), client_context(cert))
    # every event, whole and in order (the time it takes is benchmarks' business)
    assert body == b"".join(b"data: %05d\n\n" % i for i in range(2500)) + b"data: [DONE]\n\n"


# -- session tickets -----------------------------------------------------------------------


def answer(peer: Peer) -> None:
    peer.sock.sendall(peer.records(SSE_HEAD + EVENT + DONE))


def test_a_server_that_refuses_the_ticket_gets_a_full_handshake(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    # A new server context is new ticket keys: the ticket of the first is refused.
    cert = certificates["first"]
    server = serve(*[(server_context(cert), answer) for _ in range(2)])
    client = client_context(cert)
    for _ in range(2):
        assert run(server.url(), client).endswith(b"data: [DONE]\n\n")
    assert server.resumed == [False, False]


def test_a_server_that_stops_issuing_tickets_has_the_kept_one_dropped(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    """Before: the refused ticket stayed, offered on every connection for nothing."""
    cert = certificates["first"]
    silent = server_context(cert, tickets=False)
    server = serve((server_context(cert), answer), (silent, answer), (silent, answer))
    client = client_context(cert)
    key = (id(client), "127.0.0.1", server.port)
    run(server.url(), client)
    assert key in tls._sessions
    run(server.url(), client)
    assert key not in tls._sessions
    assert run(server.url(), client).endswith(b"data: [DONE]\n\n")
    assert server.resumed == [False, False, False]


def test_another_server_on_the_same_port_is_not_fooled_by_the_kept_ticket(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    first, second, both = certificates["first"], certificates["second"], certificates["both"]
    client = client_context(both)
    server = serve((server_context(first), answer), (server_context(second), answer))
    for _ in range(2):
        assert run(server.url(), client).endswith(b"data: [DONE]\n\n")
    assert server.resumed == [False, False]
    # One the client does not trust is refused, whatever ticket it holds for that port.
    server = serve((server_context(first), answer), (server_context(second), answer))
    run(server.url(), client_context(first))
    with pytest.raises(UpstreamConnectError, match="certificate verify failed"):
        run(server.url(), client_context(first))


def test_a_changed_trust_store_never_offers_the_old_contexts_ticket(
    serve: Callable[..., Server],
    certificates: dict[str, tuple[Path, Path]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same server twice, which would resume the ticket: the second connection's trust
    # store does not hold its certificate, so it must be refused.
    first, second = certificates["first"], certificates["second"]
    context = server_context(first)
    server = serve((context, answer), (context, answer))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(first[0]))
    assert run(server.url(), None).endswith(b"data: [DONE]\n\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(second[0]))
    with pytest.raises(UpstreamConnectError, match="certificate verify failed"):
        run(server.url(), None)
    assert server.resumed == [False]


def test_a_certificate_for_another_name_is_refused_and_nothing_kept(
    serve: Callable[..., Server], certificates: dict[str, tuple[Path, Path]]
) -> None:
    elsewhere = certificates["elsewhere"]
    server = serve((server_context(elsewhere), answer))
    client = client_context(elsewhere)
    with pytest.raises(UpstreamConnectError) as raised:
        run(server.url(), client)
    message = str(raised.value)
    assert message.startswith(f"TLS failure talking to https://127.0.0.1:{server.port}: ")
    assert "certificate verify failed: IP address mismatch" in message
    assert "'127.0.0.1'" in message
    assert "_ssl.c" not in message
    assert (id(client), "127.0.0.1", server.port) not in tls._sessions
