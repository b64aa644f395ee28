"""Failover decisions: what to do when an upstream fails, and the regenerate prefix match.

Pure: no I/O, no clock. The relay keeps a :class:`Progress` of what it has committed to the
client (every token it accepted from upstream goes out, in order, so "committed" is what the
user has read or will read), and asks :func:`decide` what to do about a failure.

The rules (docs/gateway.md#failover):

- Before the first token nothing has been promised: the same request goes to the next
  upstream (``retry``), whatever the mid-stream policy.
- After it, by policy. ``continue`` asks the fallback to go on from the committed text (a
  completion's prompt plus that text; a chat's messages plus that text as an assistant
  prefix, with the continuation flags the upstream supports), so nothing is sent twice.
  ``regenerate`` asks for the whole answer again and relays only what follows the committed
  prefix; a fallback whose answer diverges from it is cut off with an in-band error rather
  than contradict what the user already read (:class:`PrefixMatcher`). ``off`` ends the
  stream with an in-band error.
- Never inside a tool call: half of a tool call's JSON arguments cannot be continued or
  regenerated safely, so a failure after any tool-call delta ends with an in-band error.
- A stream that already showed reasoning is not continued (an assistant prefix carries no
  reasoning); regenerate matches reasoning and content each against what was committed.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from steadystream._types import EventKind
from steadystream.gateway.config import UpstreamConfig

__all__ = [
    "Action",
    "Cause",
    "Decision",
    "Policy",
    "PrefixMatcher",
    "Progress",
    "decide",
]


class Policy(enum.StrEnum):
    CONTINUE = "continue"
    REGENERATE = "regenerate"
    OFF = "off"


class Cause(enum.StrEnum):
    """Why an upstream attempt failed."""

    CONNECT = "connect"  # no connection could be made
    STATUS = "status"  # an HTTP error status that may succeed elsewhere
    FIRST_TOKEN_TIMEOUT = "first-token-timeout"
    STALL = "stall"  # no token for the stall timeout
    RESET = "reset"  # the connection broke, or the body ended without [DONE]
    UPSTREAM_ERROR = "upstream-error"  # an in-band error event
    BAD_PAYLOAD = "bad-payload"  # bytes that are not an OpenAI chunk
    DIVERGED = "diverged"  # a regenerated answer that differs from what was sent
    OVERSIZED_EVENT = "oversized-event"  # one event larger than limits.max_event_bytes
    SILENT_AFTER_FINISH = "silent-after-finish"  # a finish reason, then no [DONE] nor close
    STREAM_TOO_LONG = "stream-too-long"  # more events than limits.max_stream_events


class Action(enum.StrEnum):
    RETRY = "retry"  # before the first token: the same request, next upstream
    CONTINUE = "continue"
    REGENERATE = "regenerate"
    ERROR = "error"  # end the stream with an in-band error


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    upstream: UpstreamConfig | None = None  # where to go (None for ERROR)
    reason: str = ""  # for ERROR: why there is no failover


@dataclass(slots=True)
class Progress:
    """What the relay has committed to the client so far."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    text_events: int = 0
    usage_tokens: int | None = None  # the upstream's running completion_tokens, when it sends it
    tool_call: bool = False
    role_sent: bool = False

    @property
    def first_token(self) -> bool:
        return self.text_events > 0

    @property
    def tokens(self) -> int:
        """Tokens committed: the upstream's own count when it gave one, else one per event."""
        return self.usage_tokens if self.usage_tokens is not None else self.text_events

    def commit(self, kind: EventKind, text: str) -> None:
        if kind is EventKind.CONTENT:
            self.content.append(text)
        elif kind is EventKind.REASONING:
            self.reasoning.append(text)
        elif kind is EventKind.TOOL_CALL:
            self.tool_call = True
        else:
            return
        self.text_events += 1

    @property
    def content_text(self) -> str:
        return "".join(self.content)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)


def decide(
    policy: Policy,
    progress: Progress,
    candidates: Sequence[UpstreamConfig],
    *,
    chat: bool,
    retry_before_first_token: bool = True,
    attempts_left: int = 1,
    continuable_prompt: bool = True,
) -> Decision:
    """What to do about a failed attempt.

    ``candidates`` are the upstreams not tried yet for this request, in priority order.
    ``continuable_prompt`` is False for a completion whose prompt is not one string (a list
    or token ids cannot have text appended).
    """
    if attempts_left <= 0:
        return Decision(Action.ERROR, reason="no attempts left")
    if not progress.first_token:
        if not retry_before_first_token:
            return Decision(Action.ERROR, reason="retry before the first token is off")
        if not candidates:
            return Decision(Action.ERROR, reason="no upstream left to try")
        return Decision(Action.RETRY, candidates[0])
    if policy is Policy.OFF:
        return Decision(Action.ERROR, reason="mid-stream failover is off")
    if progress.tool_call:
        return Decision(Action.ERROR, reason="the stream failed inside a tool call")
    if policy is Policy.REGENERATE:
        if not candidates:
            return Decision(Action.ERROR, reason="no fallback upstream left")
        return Decision(Action.REGENERATE, candidates[0])
    if progress.reasoning:
        return Decision(Action.ERROR, reason="a stream that showed reasoning cannot be continued")
    if not chat and not continuable_prompt:
        return Decision(Action.ERROR, reason="only a single-string prompt can be continued")
    able = [u for u in candidates if not chat or u.chat_continuation != "none"]
    if not able:
        return Decision(Action.ERROR, reason="no fallback upstream that can continue a chat")
    return Decision(Action.CONTINUE, able[0])


class PrefixMatcher:
    """Checks a regenerated answer against what the client already has, piece by piece.

    ``feed(kind, text)`` returns the part of a fallback piece to relay ('' while the piece
    lies inside the committed prefix), or None once the fallback has said something else.
    ``complete`` says whether the whole committed prefix has been matched; a fallback that
    ends before that has also diverged (its answer is shorter than what was shown).
    """

    __slots__ = ("_committed", "_matched", "diverged")

    def __init__(self, content: str, reasoning: str = "") -> None:
        self._committed = {EventKind.CONTENT: content, EventKind.REASONING: reasoning}
        self._matched = {EventKind.CONTENT: 0, EventKind.REASONING: 0}
        self.diverged = False

    @property
    def complete(self) -> bool:
        return not self.diverged and all(
            self._matched[kind] == len(text) for kind, text in self._committed.items()
        )

    def end(self) -> bool:
        """The fallback finished its answer: True when it covered the whole prefix."""
        if not self.complete:
            self.diverged = True
        return not self.diverged

    def feed(self, kind: EventKind, text: str) -> str | None:
        if self.diverged:
            return None
        committed = self._committed.get(kind)
        if committed is None:
            # Anything else with text (a tool call) before the prefix is matched says
            # something the client was not shown.
            if kind.carries_text and not self.complete:
                self.diverged = True
                return None
            return text
        if kind is EventKind.CONTENT and self._matched[EventKind.REASONING] < len(
            self._committed[EventKind.REASONING]
        ):
            # The answer started before the reasoning the client saw was repeated.
            self.diverged = True
            return None
        start = self._matched[kind]
        overlap = min(len(text), len(committed) - start)
        if text[:overlap] != committed[start : start + overlap]:
            self.diverged = True
            return None
        self._matched[kind] = start + overlap
        if kind is EventKind.REASONING and self._committed[EventKind.CONTENT]:
            # The client has moved on to the answer: more thinking would come out of order.
            return ""
        return text[overlap:]
