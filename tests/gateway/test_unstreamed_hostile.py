"""Hostile whole answers to a stream request (gateway/unstreamed.py): each is relayed as a
stream a client reads to its end with the right text, or refused with a 502 naming what is
wrong before the stream starts; never an in-band error for an answer that could be streamed,
a stream many times the body's size, or a key on the client's side.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import anthropic
import openai
import orjson
import pytest

from steadystream.gateway import GatewayServer, TimelineRecorder
from steadystream.gateway.unstreamed import as_stream
from steadystream.protocol import SseEvent, new_decoder
from tests.support.gateway import chat_body, gateway_config, post
from tests.support.scripted import Script, read_request

pytestmark = pytest.mark.integration

KEY = "sk-unstreamed-hostile-0123456789"


def whole(body: bytes, *, length: int | None = None) -> bytes:
    """A 200 of ``body`` as JSON, its Content-Length ``length`` (the body's own if None)."""
    size = len(body) if length is None else length
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % size + body


class RawUpstream:
    """Answers every request on 127.0.0.1 with :attr:`answer`: bytes, or a script that
    writes to the socket; ``with`` starts and stops it."""

    def __init__(self) -> None:
        self.answer: bytes | Script = b""
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> Self:
        accepting = threading.Thread(target=self._accept, daemon=True)
        self._threads.append(accepting)
        accepting.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(10)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                peer, _ = self._listener.accept()
            except TimeoutError:
                continue
            answering = threading.Thread(target=self._answer, args=(peer,), daemon=True)
            self._threads.append(answering)
            answering.start()

    def _answer(self, peer: socket.socket) -> None:
        with peer:
            peer.settimeout(10)
            request = read_request(peer)
            if b"\r\n\r\n" not in request:
                return
            head, _, body = request.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                data = peer.recv(65536)
                if not data:
                    return
                body += data
            try:
                if isinstance(self.answer, bytes):
                    peer.sendall(self.answer)
                else:
                    self.answer(peer)
            except OSError:
                pass  # (the gateway went first)


@pytest.fixture
def upstream() -> Iterator[RawUpstream]:
    with RawUpstream() as server:
        yield server


def entry(server: RawUpstream, **extra: Any) -> dict[str, Any]:
    return {"name": "whole", "base_url": server.base_url, "api_key_env": "UP_KEY", **extra}


def answer(*choices: dict[str, Any], **fields: Any) -> bytes:
    body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m"}
    return orjson.dumps({**body, "choices": list(choices), **fields})


def said(text: Any, **message: Any) -> dict[str, Any]:
    """Choice 0 of a whole answer: a message of ``text`` (and ``message``'s fields)."""
    return {
        "index": 0,
        "message": {"role": "assistant", "content": text, **message},
        "finish_reason": "stop",
    }


def stream_chat(server: GatewayServer, **asked: Any) -> list[Any]:
    with openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        return list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True, **asked
            )
        )


def chat_text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def refusal(answered: Any) -> str:
    assert answered.status == 502
    message: str = orjson.loads(answered.body)["error"]["message"]
    assert "answered a stream request whole" in message
    assert KEY not in message
    return message


# -- what was streamed wrong ------------------------------------------------------------------


def test_content_parts_reach_the_sdks_as_their_text(upstream: RawUpstream) -> None:
    # Before: a content that was a list of parts was dropped; the client got an empty answer.
    parts = [{"type": "text", "text": "Hel"}, {"type": "image_url"}, {"type": "text", "text": "lo"}]
    upstream.answer = whole(answer(said(parts)))
    config = gateway_config(entry(upstream, dialects=["chat"]))
    with GatewayServer(config, env={"UP_KEY": KEY}) as gw:
        assert chat_text(stream_chat(gw)) == "Hello"
        root = gw.base_url.removesuffix("/v1")
        asked = {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
        with (
            anthropic.Anthropic(base_url=root, api_key="unused", max_retries=0) as client,
            client.messages.stream(model="m", **asked) as stream,  # type: ignore[arg-type]
        ):
            message = stream.get_final_message()
    assert [block.text for block in message.content if block.type == "text"] == ["Hello"]


def test_reasoning_beside_a_null_reasoning_content_is_streamed(upstream: RawUpstream) -> None:
    # vLLM's shape: ``reasoning`` with ``reasoning_content: null``. Before: the null won and
    # the reasoning was lost.
    upstream.answer = whole(answer(said("t", reasoning_content=None, reasoning="Think.")))
    with GatewayServer(gateway_config(entry(upstream)), env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    payloads = [orjson.loads(data) for _, data in answered.events if data != "[DONE]"]
    deltas = [c["delta"] for p in payloads for c in p["choices"]]
    assert [d["reasoning_content"] for d in deltas if "reasoning_content" in d] == ["Think."]
    assert [d["content"] for d in deltas if d.get("content")] == ["t"]


def test_tool_call_arguments_sent_as_an_object_reach_the_sdk_as_their_text(
    upstream: RawUpstream,
) -> None:
    # Before: the object went out as the arguments, and the gateway's own reading of the
    # stream ended it in-band (upstream_bad_payload) after the 200.
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    choice = {**said(None, tool_calls=[call]), "finish_reason": "tool_calls"}
    upstream.answer = whole(answer(choice))
    with GatewayServer(gateway_config(entry(upstream)), env={"UP_KEY": KEY}) as gw:
        chunks = stream_chat(gw)
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.id, tc.function.name, tc.function.arguments) for tc in calls] == [  # type: ignore[union-attr]
        ("call_1", "f", '{"a":1}')
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_text_past_the_event_bound_is_streamed_in_pieces(upstream: RawUpstream) -> None:
    # 2 MB of text and of arguments, within limits.max_response_bytes (16 MiB) but past
    # limits.max_event_bytes (1 MiB). Before: one event of it all, an in-band
    # upstream_oversized_event after the 200.
    text = "steady " * 300_000
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": text}}
    upstream.answer = whole(answer(said(text, tool_calls=[call])))
    with GatewayServer(gateway_config(entry(upstream)), env={"UP_KEY": KEY}) as gw:
        chunks = stream_chat(gw)
    assert chat_text(chunks) == text
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert "".join(tc.function.arguments or "" for tc in calls) == text  # type: ignore[union-attr]
    assert [tc.id for tc in calls if tc.id is not None] == ["c"]  # (named once, first)


def test_a_huge_model_or_id_is_not_repeated_in_every_event(upstream: RawUpstream) -> None:
    # Before: a 2 MB model went into every event, past limits.max_event_bytes: an in-band
    # error after the 200.
    upstream.answer = whole(answer(said("fine"), model="m" * 2_000_000, id="i" * 2_000_000))
    with GatewayServer(gateway_config(entry(upstream)), env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    assert answered.status == 200
    assert answered.text == "fine"
    assert answered.done
    assert len(answered.body) < 10_000


def test_usage_keeps_its_counts_only(upstream: RawUpstream) -> None:
    counts = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    details = {"cached_tokens": 1, "note": "x"}
    deep = orjson.loads(b"[" * 250 + b"]" * 250)
    usage = {**counts, "prompt_tokens_details": details, "note": "y" * 100_000, "deep": deep}
    upstream.answer = whole(answer(said("a"), usage=usage))
    with GatewayServer(gateway_config(entry(upstream)), env={"UP_KEY": KEY}) as gw:
        chunks = stream_chat(gw, stream_options={"include_usage": True})
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump(exclude_none=True) == {
        **counts,
        "prompt_tokens_details": {"cached_tokens": 1},
    }


# -- what is refused, naming why, before the stream starts ------------------------------------


@pytest.mark.parametrize("route", ["chat", "messages"])
def test_two_choices_of_one_index_are_a_502_naming_them(upstream: RawUpstream, route: str) -> None:
    # Before: both streamed as choice 0, their texts run together ("ab").
    upstream.answer = whole(answer(said("a"), said("b")))
    config = gateway_config(entry(upstream, dialects=["chat"]))
    with GatewayServer(config, env={"UP_KEY": KEY}) as gw:
        if route == "chat":
            answered = post(gw.base_url, "/chat/completions", chat_body(5))
        else:
            body = {"model": "m", "max_tokens": 5, "stream": True, "messages": [
                {"role": "user", "content": "hi"}]}  # fmt: skip
            answered = post(gw.base_url, "/messages", body)
    assert "choices 0 and 1 have the same index (0)" in refusal(answered)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (answer(), "has no choice"),
        (answer(said(5)), "choice 0 has a content that is a number"),
        (answer(said({"text": "a"})), "choice 0 has a content that is an object"),
        (answer(said(["a"])), "choice 0 has a content whose part 0 is not an object"),
        (answer(said("a", refusal=True)), "choice 0 has a refusal that is a boolean"),
        (answer(said("a", tool_calls={"id": "x"})), "tool_calls that are an object"),
        (
            answer(said("a", tool_calls=[{"function": "f"}])),
            "tool call 0 has a function that is a str",
        ),
        (
            answer(said("a", tool_calls=[{"function": {"name": "f", "arguments": 1}}])),
            "tool call 0 has arguments that is a number",
        ),
        (
            answer(said("a", tool_calls=[{"id": "i" * 5000, "function": {"name": "f"}}])),
            "tool call 0 has an id that is no short string",
        ),
    ],
    ids=[
        "no-choice",
        "content-number",
        "content-object",
        "content-bad-part",
        "refusal-boolean",
        "tool-calls-object",
        "function-string",
        "arguments-number",
        "huge-call-id",
    ],
)
def test_an_answer_that_cannot_be_streamed_is_a_502_naming_why(
    upstream: RawUpstream, body: bytes, named: str
) -> None:
    upstream.answer = whole(body)
    with GatewayServer(gateway_config(entry(upstream)), env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    assert named in refusal(answered)


def test_a_stream_many_times_the_body_is_refused(upstream: RawUpstream) -> None:
    # 500 tiny choices and an id of 1,000 characters: a body of 50 KB whose stream repeats
    # the id in 1,500 events (1.6 MB). Before: all of it built in memory and sent.
    choices = [{"index": i, "message": {"content": "w"}} for i in range(500)]
    upstream.answer = whole(answer(*choices, id="i" * 1000))
    config = gateway_config(entry(upstream), limits={"max_response_bytes": "64KiB"})
    with GatewayServer(config, env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    assert "larger than twice limits.max_response_bytes (65536)" in refusal(answered)


def test_a_body_cut_short_is_a_502_naming_the_whole_answer(upstream: RawUpstream) -> None:
    data = answer(said("a"))

    def cut_short(peer: socket.socket) -> None:  # a length 100 bytes past what is sent
        peer.sendall(whole(data, length=len(data) + 100))
        peer.shutdown(socket.SHUT_WR)

    upstream.answer = cut_short
    with GatewayServer(gateway_config(entry(upstream)), env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    assert "its body broke" in refusal(answered)


def test_bytes_past_the_length_are_not_read(upstream: RawUpstream) -> None:
    upstream.answer = whole(answer(said("a"))) + b'data: {"choices": []}\n\ngarbage'
    with GatewayServer(gateway_config(entry(upstream)), env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    assert answered.status == 200
    assert answered.text == "a"
    assert answered.done


def test_the_upstreams_key_reaches_neither_the_client_nor_the_records(
    upstream: RawUpstream, tmp_path: Path
) -> None:
    text = f"your key is {KEY}"
    upstream.answer = whole(answer(said(text), id=f"id-{KEY}", model=f"m-{KEY}"))
    recorder = TimelineRecorder(tmp_path, keep_text=True)
    config = gateway_config(entry(upstream), recording={"keep_text": True})
    with GatewayServer(config, recorder=recorder, env={"UP_KEY": KEY}) as gw:
        answered = post(gw.base_url, "/chat/completions", chat_body(5))
    recorder.close()
    recordings = b"".join(path.read_bytes() for path in tmp_path.iterdir())
    assert answered.status == 200
    assert answered.text == "your key is ***"
    assert b"your key is ***" in recordings
    assert KEY[:10].encode() not in answered.body
    assert KEY[:10].encode() not in recordings


# -- the stream of an answer, read back -------------------------------------------------------


def events_of(data: bytes) -> list[dict[str, Any]]:
    events = [e for e in new_decoder().feed(data) if isinstance(e, SseEvent)]
    assert events[-1].data == "[DONE]"
    return [orjson.loads(e.data) for e in events[:-1]]


@pytest.mark.parametrize("index", [-1, "0", 2**70, 1.0, None, True])
def test_a_choice_of_no_usable_index_takes_its_place(index: Any) -> None:
    body = answer({"message": {"content": "a"}, "index": 0})
    body = body.replace(b'"index":0', b'"index":' + orjson.dumps(index) if index != 2**70
                        else b'"index":1180591620717411303424')  # fmt: skip
    payloads = events_of(as_stream("chat", body))
    assert {c["index"] for p in payloads for c in p["choices"]} == {0}


def test_ten_thousand_choices_are_streamed_in_order() -> None:
    choices = [{"index": i, "message": {"content": f"{i}"}} for i in range(10_000)]
    payloads = events_of(as_stream("chat", answer(*choices), limit=16 << 20))
    texts: dict[int, str] = {}
    for payload in payloads:
        (choice,) = payload["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + (
            choice["delta"].get("content") or ""
        )
    assert texts == {i: f"{i}" for i in range(10_000)}


def test_a_completion_text_that_is_no_text_is_refused_naming_it() -> None:
    from steadystream._exceptions import ProtocolError

    body = orjson.dumps({"choices": [{"index": 0, "text": 7}]})
    with pytest.raises(ProtocolError, match=r"choice 0 has a text that is a number"):
        as_stream("completions", body)
