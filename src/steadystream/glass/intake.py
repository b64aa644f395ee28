"""What a page's glass probe posts, checked like any input, and the timelines it becomes.

The probe (``probe.js``, served at ``/steadystream/glass.js``) posts one report per stream to
``/steadystream/glass``::

    {"schema": "steadystream.glass/1", "stream_id": "req-1", "started_at": 1767225600.0,
     "labels": {"renderer": "smooth"}, "outcome": "complete",
     "first_byte_ms": 180.2, "end_ms": 2400.5,
     "arrivals": [[182.0, 1], [203.4, 1], ...],     # when the page's reader yielded tokens
     "frames":   [[190.1, 1], [206.8, 2], ...],     # animation frames that showed tokens
     "texts": null}                                 # per arrival, only if the page opted in

Times are milliseconds from the moment the page sent the request. A report becomes two
timelines with the same stream id: ``where = client`` (the page's arrivals; label
``vantage = browser``) and ``where = glass`` (one event per frame, its tokens the tokens that
frame showed). Both are offsets from the same instant, so paint minus arrival per token is
what the browser (and the page's renderer) added.

Everything is bounded: the body (``max_body_bytes``), the events (``max_events`` per list),
the labels (16 of the page's, short, and the probe's ``truncated_probe``), times (finite, in
order, under a day). An error names the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from steadystream._api_errors import ApiError, is_client_id
from steadystream._types import Event, EventKind, Outcome, TokenSource, Where
from steadystream.timeline import Timeline

__all__ = ["GLASS_SCHEMA", "GlassLimits", "GlassReport", "parse_report"]

GLASS_SCHEMA = "steadystream.glass/1"
_DAY_MS = 86_400_000.0
_MAX_TOKENS_PER_EVENT = 100_000
_MAX_LABELS = 16  # a page's own labels (docs/glass.md)
_TRUNCATED_LABEL = "truncated_probe"  # added by the probe past its maxEvents
# Numbers must be JSON numbers: pydantic's lax mode would read "1.5" as a time and true as
# a token, so text where a number goes would be recorded as one.
_Number = Annotated[float, Strict()]
_Count = Annotated[int, Strict()]


class GlassLimits(BaseModel):
    """Bounds on what one post may carry (the gateway's ``glass`` config section has them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_body_bytes: int = Field(1_048_576, ge=1024, description="larger posts get 413")
    max_events: int = Field(20_000, ge=1, description="arrivals or frames per post")
    max_text_bytes: int = Field(262_144, ge=0, description="text kept from a post, in all")


class GlassReport(BaseModel):
    """One stream as a page saw it; see the module docstring for the shape."""

    model_config = ConfigDict(extra="forbid")

    schema_: Literal["steadystream.glass/1"] = Field(alias="schema")
    stream_id: str
    started_at: _Number | None = Field(None, ge=0, le=1e11)
    labels: dict[str, str] = Field(default_factory=dict)
    outcome: Literal["complete", "cancelled", "error", "truncated"] = "complete"
    first_byte_ms: _Number | None = Field(None, ge=0, le=_DAY_MS)
    end_ms: _Number | None = Field(None, ge=0, le=_DAY_MS)
    arrivals: list[tuple[_Number, _Count]]
    frames: list[tuple[_Number, _Count]]
    texts: list[str] | None = None

    @field_validator("stream_id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not is_client_id(value):
            raise ValueError("1 to 128 of A-Z a-z 0-9 . _ : -")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        # The page's own, and the label the probe adds when it stopped recording.
        if len(value) - (_TRUNCATED_LABEL in value) > _MAX_LABELS:
            raise ValueError(f"at most {_MAX_LABELS} labels (besides {_TRUNCATED_LABEL!r})")
        for key, text in value.items():
            if not 0 < len(key) <= 64 or len(text) > 256:
                raise ValueError("keys of 1 to 64 characters, values of at most 256")
        return value

    @field_validator("arrivals", "frames")
    @classmethod
    def _events(cls, value: list[tuple[float, int]]) -> list[tuple[float, int]]:
        previous = 0.0
        for i, (t, tokens) in enumerate(value):
            if not math.isfinite(t) or not 0 <= t <= _DAY_MS:
                raise ValueError(f"event {i}: time {t!r} is not between 0 and a day in ms")
            if t < previous:
                raise ValueError(f"event {i}: time {t} goes back from {previous}")
            if not 1 <= tokens <= _MAX_TOKENS_PER_EVENT:
                raise ValueError(f"event {i}: {tokens} tokens (1 to {_MAX_TOKENS_PER_EVENT})")
            previous = t
        return value

    @model_validator(mode="after")
    def _consistent(self) -> GlassReport:
        shown = sum(n for _, n in self.frames)
        arrived = sum(n for _, n in self.arrivals)
        if shown > arrived:
            raise ValueError(f"frames show {shown} tokens, more than the {arrived} that arrived")
        if self.texts is not None and len(self.texts) != len(self.arrivals):
            raise ValueError(f"texts has {len(self.texts)} entries, arrivals {len(self.arrivals)}")
        return self

    def timelines(
        self,
        *,
        keep_text: bool,
        redact: Callable[[str], str] = str,
        hide_keys: Callable[[str], str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> tuple[Timeline, Timeline]:
        """The page's arrivals (``client``) and paints (``glass``), in ns from request sent.

        ``redact`` is applied to the page's labels, names and values (a page may echo a key
        it holds), ``hide_keys`` (else ``redact``) to its texts, which keep their line
        breaks; ``labels`` are the server's own, and win over the page's of the same name.
        """
        labels = {
            **{redact(key): redact(value) for key, value in self.labels.items()},
            **(labels or {}),
            "vantage": "browser",
        }
        outcome = Outcome(self.outcome)
        first_byte = _ns(self.first_byte_ms)
        end = _ns(self.end_ms)
        hide = redact if hide_keys is None else hide_keys
        texts = [hide(t) for t in self.texts] if keep_text and self.texts is not None else None
        arrivals = [
            Event(_ns(t) or 0, texts[i] if texts else "", n, EventKind.CONTENT)
            for i, (t, n) in enumerate(self.arrivals)
        ]
        client = Timeline.from_events(
            arrivals,
            stream_id=self.stream_id,
            where=Where.CLIENT,
            keep_text=texts is not None,
            first_byte_ns=first_byte,
            end_ns=end,
            outcome=outcome,
            token_source=TokenSource.EXACT,
            labels=labels,
            started_at=self.started_at,
        )
        frames = [Event(_ns(t) or 0, "", n, EventKind.CONTENT) for t, n in self.frames]
        last_paint = frames[-1].time_ns if frames else None
        glass = Timeline.from_events(
            frames,
            stream_id=self.stream_id,
            where=Where.GLASS,
            keep_text=False,
            first_byte_ns=first_byte,
            end_ns=max(v for v in (end, last_paint, 0) if v is not None),
            outcome=outcome,
            token_source=TokenSource.EXACT,
            labels=labels,
            started_at=self.started_at,
        )
        return client, glass


def _ns(ms: float | None) -> int | None:
    return None if ms is None else round(ms * 1_000_000)


def parse_report(raw: bytes, limits: GlassLimits) -> GlassReport:
    """Check a posted body; an :class:`ApiError` (400 or 413) names what is wrong."""
    if len(raw) > limits.max_body_bytes:
        raise ApiError(
            413,
            f"the glass report is larger than {limits.max_body_bytes} bytes",
            code="request_too_large",
        )
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the glass report is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiError(400, "the glass report must be a JSON object")
    for name in ("arrivals", "frames"):
        items = data.get(name)
        if isinstance(items, list) and len(items) > limits.max_events:
            raise ApiError(
                413, f"{name} has {len(items)} events; at most {limits.max_events}", param=name
            )
    texts = data.get("texts")
    if isinstance(texts, list) and _utf8_size(texts) > limits.max_text_bytes:
        raise ApiError(413, f"texts exceed {limits.max_text_bytes} bytes", param="texts")
    try:
        return GlassReport.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "body"
        message = error["msg"].removeprefix("Value error, ")
        raise ApiError(400, f"{field}: {message}", param=field) from exc


def _utf8_size(texts: list[Any]) -> int:
    """The bytes the texts hold (the limit is in bytes: one emoji is four of them)."""
    return sum(len(str(t).encode("utf-8", "surrogatepass")) for t in texts)
