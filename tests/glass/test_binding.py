"""What binds a glass report to an answer, once, and bounds what clients may post: tokens,
used-token markers, per-client budgets and the glass files' own byte budget, on fake clocks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from steadystream._api_errors import ApiError
from steadystream._clock import NS_PER_S
from steadystream.files import read_jsonl
from steadystream.gateway.recording import TimelineRecorder
from steadystream.glass.budget import ClientBudgets, OverBudget
from steadystream.glass.once import MarkerClaims, MemoryClaims
from steadystream.glass.recording import GlassRecorder
from steadystream.glass.tokens import GLASS_TOKEN_HEADER, GlassTokens
from tests.support.timelines import make_timeline

SECRET = b"s" * 32


class Clock:
    """Monotonic nanoseconds, moved by hand."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


class Wall:
    """Unix seconds, moved by hand."""

    def __init__(self, now: float = 1_767_225_600.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def refusal(tokens: GlassTokens, token: str | None, tenant: str = "t") -> tuple[int, str | None]:
    with pytest.raises(ApiError) as caught:
        tokens.check(token, tenant)
    assert caught.value.param == GLASS_TOKEN_HEADER
    return caught.value.status, caught.value.code


def test_a_token_binds_its_stream_and_tenant_and_expires() -> None:
    wall = Wall()
    tokens = GlassTokens(SECRET, 300, wall)
    token = tokens.mint("req-1.a:b", "t")
    ticket = tokens.check(token, "t")
    assert (ticket.stream_id, ticket.tenant, ticket.expires) == ("req-1.a:b", "t", 1_767_225_900)
    assert refusal(tokens, token, "other") == (403, "glass_token_invalid")
    assert refusal(tokens, token.replace(".req-1.a:b", ".req-2.a:b")) == (
        403,
        "glass_token_invalid",
    )
    later = token.replace("1767225900", "1767229500")  # a longer life, written in by hand
    assert refusal(tokens, later) == (403, "glass_token_invalid")
    assert refusal(GlassTokens(b"o" * 32, 300, wall), token) == (403, "glass_token_invalid")
    for bad in ("", None, "x", "1.2.3", "2" + token[1:], token + "\n", token.replace(".", "..", 1)):
        assert refusal(tokens, bad)[0] == 403
    wall.now += 300
    assert tokens.check(token, "t").stream_id == "req-1.a:b"  # good through its last second
    wall.now += 1
    assert refusal(tokens, token) == (403, "glass_token_expired")


def test_a_secret_must_be_long_and_is_never_shown() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        GlassTokens(b"short", 300, Wall())
    assert "s" * 8 not in repr(GlassTokens(SECRET, 300, Wall()))


def test_a_used_token_is_refused_by_every_process_sharing_the_directory(tmp_path: Path) -> None:
    tokens = GlassTokens(SECRET, 120, Wall())
    ticket = tokens.check(tokens.mint("r-1", "t"), "t")
    one, two = MarkerClaims(tmp_path), MarkerClaims(tmp_path)  # two workers
    one.claim(ticket, 1_767_225_600.0)
    with pytest.raises(ApiError) as caught:
        two.claim(ticket, 1_767_225_601.0)
    assert (caught.value.status, caught.value.code) == (409, "glass_report_taken")
    other = tokens.check(tokens.mint("r-2", "t"), "t")
    two.claim(other, 1_767_225_601.0)


def test_a_marker_that_cannot_be_made_refuses_the_report_with_503(tmp_path: Path) -> None:
    tokens = GlassTokens(SECRET, 120, Wall())
    (tmp_path / "file").write_text("")
    claims = MarkerClaims(tmp_path / "file" / "used")  # a folder under a file: never made
    with pytest.raises(ApiError) as caught:
        claims.claim(tokens.check(tokens.mint("r-1", "t"), "t"), 1_767_225_600.0)
    assert (caught.value.status, caught.value.code) == (503, "glass_unavailable")


def test_markers_go_once_their_tokens_have_expired(tmp_path: Path) -> None:
    wall = Wall()
    tokens = GlassTokens(SECRET, 60, wall)
    claims = MarkerClaims(tmp_path)
    for i in range(50):
        claims.claim(tokens.check(tokens.mint(f"r-{i}", "t"), "t"), wall.now)
    assert sum(len(files) for _, _, files in os.walk(tmp_path)) == 50
    wall.now += 3 * 60  # every one of them expired: a new claim sweeps them
    fresh = tokens.check(tokens.mint("r-new", "t"), "t")
    claims.claim(fresh, wall.now)
    assert sum(len(files) for _, _, files in os.walk(tmp_path)) == 1


def test_used_tokens_in_memory_are_bounded_and_forgotten_once_expired() -> None:
    wall = Wall()
    tokens = GlassTokens(SECRET, 60, wall)
    claims = MemoryClaims(max_claims=3)
    tickets = [tokens.check(tokens.mint(f"r-{i}", "t"), "t") for i in range(4)]
    for ticket in tickets[:3]:
        claims.claim(ticket, wall.now)
    with pytest.raises(ApiError) as caught:
        claims.claim(tickets[0], wall.now)
    assert caught.value.status == 409
    with pytest.raises(ApiError) as caught:
        claims.claim(tickets[3], wall.now)
    assert (caught.value.status, caught.value.code) == (503, "glass_busy")
    wall.now += 3 * 60
    later = tokens.check(tokens.mint("r-later", "t"), "t")
    claims.claim(later, wall.now)
    assert len(claims) == 1


def budgets(clock: Clock, max_clients: int = 100) -> ClientBudgets:
    return ClientBudgets(
        posts_per_s=2.0,
        post_burst=3,
        bytes_per_s=1000,
        byte_burst=4000,
        max_clients=max_clients,
        now_ns=clock,
    )


def test_a_client_gets_its_burst_then_its_rate_in_simulated_time() -> None:
    clock = Clock()
    limit = budgets(clock)
    assert [limit.take_post("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.take_post("a") == pytest.approx(0.5)  # one post every half second
    assert limit.take_post("b") == 0.0  # another client, another bucket
    clock.advance(NS_PER_S // 4)
    assert limit.take_post("a") == pytest.approx(0.25)  # half of one post back: not yet
    clock.advance(NS_PER_S // 4)
    assert limit.take_post("a") == 0.0
    assert limit.take_bytes("a", 3000) == 0.0
    assert limit.take_bytes("a", 3000) == pytest.approx(2.0)  # 1000 there, 2000 to wait for
    clock.advance(2 * NS_PER_S)
    assert limit.take_bytes("a", 3000) == 0.0
    clock.advance(3600 * NS_PER_S)  # idle: back to the burst, no more
    assert [limit.take_post("a") for _ in range(4)][-1] > 0


def test_ten_thousand_addresses_keep_the_table_bounded() -> None:
    limit = budgets(Clock(), max_clients=100)
    for i in range(10_000):
        limit.take_post(f"address:10.0.{i // 256}.{i % 256}")
    assert len(limit) == 100


def test_a_refusal_says_when_to_come_back() -> None:
    refused = OverBudget("2 reports a second", 0.2)
    assert (refused.status, refused.code) == (429, "glass_rate_limited")
    assert refused.response().headers["retry-after"] == "1"
    assert OverBudget("x", 7.01).response().headers["retry-after"] == "8"


def test_glass_files_keep_their_budget_and_never_touch_the_streams(tmp_path: Path) -> None:
    streams = TimelineRecorder(tmp_path, rotate_streams=1, keep_files=2)
    streams.write([make_timeline([1.0, 2.0], stream_id="real-0")])
    streams.write([make_timeline([1.0, 2.0], stream_id="real-1")])
    budget = 64 * 1024
    glass = GlassRecorder(tmp_path, max_disk_bytes=budget)
    for i in range(400):
        glass.write([make_timeline([float(k) for k in range(40)], stream_id=f"glass-{i}")])
    streams.close()
    on_disk = sum(p.stat().st_size for p in tmp_path.glob("glass-*.jsonl"))
    assert budget // 2 < on_disk <= budget
    kept = {t.stream_id for p in tmp_path.glob("gateway-*.jsonl") for t in read_jsonl(p).timelines}
    assert kept == {"real-0", "real-1"}
    newest = {t.stream_id for p in tmp_path.glob("glass-*.jsonl") for t in read_jsonl(p).timelines}
    assert "glass-399" in newest
    assert "glass-0" not in newest
    # another worker's recorder counts these files too, and a report larger than a file's
    # share gets a file of its own
    other = GlassRecorder(tmp_path, max_disk_bytes=budget)
    big = make_timeline([float(k) for k in range(2000)], stream_id="big")
    other.write([big])
    assert sum(p.stat().st_size for p in tmp_path.glob("glass-*.jsonl")) <= budget
    assert [t.stream_id for t in read_jsonl(other.path or tmp_path).timelines] == ["big"]
