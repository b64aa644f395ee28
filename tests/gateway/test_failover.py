"""Failover decisions and the regenerate prefix match (pure)."""

from __future__ import annotations

import pytest

from steadystream import EventKind
from steadystream.gateway.config import UpstreamConfig
from steadystream.gateway.failover import Action, Policy, PrefixMatcher, Progress, decide

A = UpstreamConfig(name="a", base_url="http://127.0.0.1:1/v1")
B = UpstreamConfig(name="b", base_url="http://127.0.0.1:2/v1")
PLAIN = UpstreamConfig(name="plain", base_url="http://127.0.0.1:3/v1", chat_continuation="none")


def delivered(*texts: str, kind: EventKind = EventKind.CONTENT) -> Progress:
    progress = Progress()
    for text in texts:
        progress.commit(kind, text)
    return progress


@pytest.mark.parametrize("policy", list(Policy))
def test_before_the_first_token_every_policy_retries_on_the_next_upstream(policy: Policy) -> None:
    decision = decide(policy, Progress(), [B], chat=True)
    assert decision.action is Action.RETRY
    assert decision.upstream is B


def test_before_the_first_token_with_nothing_left_is_an_error() -> None:
    decision = decide(Policy.CONTINUE, Progress(), [], chat=True)
    assert decision.action is Action.ERROR
    assert "no upstream left" in decision.reason
    off = decide(Policy.CONTINUE, Progress(), [B], chat=True, retry_before_first_token=False)
    assert off.action is Action.ERROR


def test_mid_stream_by_policy() -> None:
    progress = delivered("Hello", " there")
    assert decide(Policy.CONTINUE, progress, [B], chat=True).action is Action.CONTINUE
    assert decide(Policy.REGENERATE, progress, [B], chat=True).action is Action.REGENERATE
    off = decide(Policy.OFF, progress, [B], chat=True)
    assert off.action is Action.ERROR
    assert "off" in off.reason


def test_never_inside_a_tool_call() -> None:
    progress = delivered("get_weather", '{"city": "Par', kind=EventKind.TOOL_CALL)
    for policy in (Policy.CONTINUE, Policy.REGENERATE):
        decision = decide(policy, progress, [B], chat=True)
        assert decision.action is Action.ERROR
        assert "tool call" in decision.reason


def test_continue_skips_upstreams_that_cannot_continue_a_chat() -> None:
    progress = delivered("Hi")
    assert decide(Policy.CONTINUE, progress, [PLAIN, B], chat=True).upstream is B
    assert decide(Policy.CONTINUE, progress, [PLAIN], chat=True).action is Action.ERROR
    # A completion is continued by its prompt, which every server takes.
    assert decide(Policy.CONTINUE, progress, [PLAIN], chat=False).upstream is PLAIN


def test_continue_needs_a_single_string_prompt_and_no_reasoning() -> None:
    progress = delivered("Hi")
    refused = decide(Policy.CONTINUE, progress, [B], chat=False, continuable_prompt=False)
    assert refused.action is Action.ERROR
    thinking = delivered("let me think", kind=EventKind.REASONING)
    assert decide(Policy.CONTINUE, thinking, [B], chat=True).action is Action.ERROR
    assert decide(Policy.REGENERATE, thinking, [B], chat=True).action is Action.REGENERATE


def test_no_attempts_left() -> None:
    decision = decide(Policy.CONTINUE, delivered("x"), [B], chat=True, attempts_left=0)
    assert decision.action is Action.ERROR


def test_progress_counts_tokens_from_usage_when_given() -> None:
    progress = delivered("a", "b", "c")
    assert progress.tokens == 3
    progress.usage_tokens = 7
    assert progress.tokens == 7
    assert progress.content_text == "abc"


def test_prefix_matcher_suppresses_what_was_delivered_across_any_split() -> None:
    matcher = PrefixMatcher("The quick brown")
    out = [matcher.feed(EventKind.CONTENT, piece) for piece in ("The", " qu", "ick bro", "wn fox")]
    assert out == ["", "", "", " fox"]
    assert matcher.complete
    assert matcher.feed(EventKind.CONTENT, " jumps") == " jumps"


def test_prefix_matcher_divergence_is_final() -> None:
    matcher = PrefixMatcher("The quick brown")
    assert matcher.feed(EventKind.CONTENT, "The slow") is None
    assert matcher.diverged
    assert matcher.feed(EventKind.CONTENT, " brown") is None


def test_a_shorter_regenerated_answer_has_diverged() -> None:
    matcher = PrefixMatcher("The quick brown")
    assert matcher.feed(EventKind.CONTENT, "The quick") == ""
    assert not matcher.end()
    assert matcher.diverged


def test_a_tool_call_before_the_prefix_is_matched_diverges() -> None:
    matcher = PrefixMatcher("Sure")
    assert matcher.feed(EventKind.TOOL_CALL, "get_weather") is None


def test_reasoning_is_matched_before_content() -> None:
    matcher = PrefixMatcher("Answer", reasoning="Think")
    assert matcher.feed(EventKind.REASONING, "Think") == ""
    assert matcher.feed(EventKind.REASONING, " more") == ""  # the client moved on to the answer
    assert matcher.feed(EventKind.CONTENT, "Answer is") == " is"
    early = PrefixMatcher("Answer", reasoning="Think")
    assert early.feed(EventKind.CONTENT, "Answer") is None
