"""A stream still open when the gateway shuts down ends in-band, with the reason.

uvicorn gives open streams its graceful time (two seconds), then cancels them. A cancelled
stream used to be cut short: a body without its last chunk, no word of why, and a traceback
of the cancel in the server's log for each. It now ends as any failure mid-stream does: an
error event in the client's dialect (code ``gateway_shutdown``; Responses' ``server_error``;
Anthropic's ``overloaded_error``, which its SDK retries), then the body's proper end.
"""

from __future__ import annotations

import http.client
import threading
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from steadystream import Outcome
from steadystream.gateway import GatewayServer
from steadystream.lab import LabServer
from steadystream.protocol import SseEvent, new_decoder
from tests.support.gateway import MemorySink, chat_body, finished_truth, gateway_config, upstream
from tests.support.resume import read_stream

pytestmark = pytest.mark.integration

PATIENT = {"first_token_timeout": "30s", "stall_timeout": "10s"}
LONG = 2000  # tokens: about 100 s of the lab's steady scenario, far past the graceful time
ROUTES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": chat_body(LONG),
    "/v1/messages": {
        "model": "lab",
        "stream": True,
        "max_tokens": LONG,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/responses": {"model": "lab", "input": "hi", "stream": True, "max_output_tokens": LONG},
}


def _stream_across_a_stop(
    gw: GatewayServer, path: str, body: dict[str, Any] | None, request_id: str
) -> tuple[list[SseEvent], bool, list[str]]:
    """Read a stream; once a few events came, stop the gateway (in a thread, as a SIGTERM
    would) and read on to the end. The events, whether the body ended properly, and what
    the stop raised."""
    url = urlsplit(gw.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    stop_failed: list[str] = []

    def stop() -> None:
        try:
            gw.stop()
        except Exception as exc:  # (asserted on below)
            stop_failed.append(repr(exc))

    stopper = threading.Thread(target=stop)
    events: list[SseEvent] = []
    ended_properly = False
    try:
        connection.request(
            "GET" if body is None else "POST",
            path,
            body=None if body is None else orjson.dumps(body),
            headers={"Content-Type": "application/json", "X-Request-Id": request_id},
        )
        response = connection.getresponse()
        assert response.status == 200
        decoder = new_decoder()
        try:
            while chunk := response.read1(65536):
                events += [e for e in decoder.feed(chunk) if isinstance(e, SseEvent)]
                if len(events) >= 4 and stopper.ident is None:
                    stopper.start()
            ended_properly = True  # (http.client read the last chunk: the body is whole)
        except http.client.IncompleteRead:
            ended_properly = False
    finally:
        connection.close()
        if stopper.ident is not None:
            stopper.join(timeout=30)
    return events, ended_properly, stop_failed


@pytest.mark.parametrize("path", list(ROUTES))
def test_a_stream_open_at_shutdown_ends_in_band_with_the_reason(
    path: str, capfd: pytest.CaptureFixture[str]
) -> None:
    sink = MemorySink()
    with LabServer("steady") as lab:
        gw = GatewayServer(
            gateway_config(upstream(lab, "lab"), watchdog=PATIENT, resume={"enabled": False}),
            recorder=sink,
        )
        gw.start()
        try:
            events, ended_properly, stop_failed = _stream_across_a_stop(
                gw, path, ROUTES[path], "bye-now"
            )
        finally:
            gw.stop()
        _, down = sink.edges("bye-now")
        truth = finished_truth(lab, "bye-now")
    assert stop_failed == []
    assert ended_properly, "the body was cut short"
    payloads = [e.data for e in events if e.data != "[DONE]"]
    last = orjson.loads(payloads[-1])
    if path == "/v1/messages":
        assert events[-1].event == "error"
        assert last["error"]["type"] == "overloaded_error"
        message = last["error"]["message"]
    elif path == "/v1/responses":
        assert last["type"] == "response.failed"
        assert last["response"]["error"]["code"] == "server_error"  # (the API's own codes)
        message = last["response"]["error"]["message"]
    else:
        assert events[-1].data == "[DONE]"
        assert last["error"]["code"] == "gateway_shutdown"
        message = last["error"]["message"]
    assert "shut down" in message
    assert down.outcome is Outcome.ERROR
    assert down.error is not None
    assert "shut down" in down.error
    assert truth.tokens_generated < LONG  # the upstream was let go
    err = capfd.readouterr().err
    assert "Exception in ASGI application" not in err
    assert "CancelledError" not in err


def test_a_resumed_reader_following_a_stream_at_shutdown_is_told_in_band(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The stream's own client left (resume's grace keeps the generation); a reader came back
    # through GET /v1/streams/{id} and follows it live when the gateway stops.
    with LabServer("steady") as lab:
        gw = GatewayServer(gateway_config(upstream(lab, "lab"), watchdog=PATIENT))
        gw.start()
        try:
            first = read_stream(
                gw.url, "POST", "/v1/chat/completions", chat_body(LONG), leave_after=3
            )
            assert first.stream_id is not None
            events, ended_properly, stop_failed = _stream_across_a_stop(
                gw, f"/v1/streams/{first.stream_id}", None, "follower"
            )
        finally:
            gw.stop()
    assert stop_failed == []
    assert ended_properly, "the body was cut short"
    payloads = [e.data for e in events if e.data != "[DONE]"]
    assert orjson.loads(payloads[-1])["error"]["code"] == "gateway_shutdown"
    assert sum("gateway_shutdown" in data for data in payloads) == 1  # (told once)
    err = capfd.readouterr().err
    assert "Exception in ASGI application" not in err
