"""Every parameter of the lab engine, with its unit and default (docs/lab.md lists them all).

A :class:`Scenario` is a tree of small frozen pydantic models. Durations are milliseconds
(the ``_ms`` suffix says so) and are turned into integer nanoseconds only inside the engine.
Scenarios come from the built-in presets (:mod:`steadystream.lab.presets`) or from YAML
files (:mod:`steadystream.lab.scenario_file`), which may start from a preset.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from steadystream._validation import ConfigErrorWhenCalled

__all__ = [
    "MAX_OVERSIZE_BYTES",
    "MAX_TOKENS",
    "BackgroundParams",
    "EmissionParams",
    "FaultParams",
    "KvCacheParams",
    "NetworkParams",
    "OutputParams",
    "Scenario",
    "SchedulerParams",
    "ServerParams",
    "SpecDecodeParams",
]

MAX_TOKENS = 1 << 24
"""The most tokens a count may name (an answer, a prompt), and the most the KV cache may
hold: far past any context window, and small enough that an answer's text, drawn at its
arrival, stays a bounded amount of work."""
MAX_OVERSIZE_BYTES = 64 << 20
"""The largest event the oversize fault makes (64 MiB, the same bound for the header)."""


class _Params(BaseModel):
    # No infinity or NaN: every duration becomes integer nanoseconds in the engine.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SchedulerParams(_Params):
    """One scheduler step: base + per running sequence + per prefill token."""

    step_base_ms: float = Field(25.0, gt=0, description="fixed cost of every step")
    step_per_seq_ms: float = Field(0.02, ge=0, description="added per sequence in the batch")
    prefill_per_token_ms: float = Field(0.02, ge=0, description="added per prompt token")
    chunked_prefill: bool = Field(True, description="split long prompts over several steps")
    prefill_chunk_tokens: int = Field(
        512, ge=1, description="prefill tokens per step when chunked (all sequences together)"
    )
    max_running: int = Field(256, ge=1, description="admission limit: sequences in the batch")
    lag_reset_ms: float = Field(
        250.0, gt=0, description="when real time runs this far past the plan, re-anchor it"
    )


class KvCacheParams(_Params):
    """The KV cache budget; a step that would exceed it preempts the newest sequence."""

    block_tokens: int = Field(16, ge=1, le=MAX_TOKENS, description="tokens per KV block")
    total_blocks: int = Field(65_536, ge=1, le=MAX_TOKENS, description="blocks in the cache")

    @model_validator(mode="after")
    def _bounded(self) -> KvCacheParams:
        if self.block_tokens * self.total_blocks > MAX_TOKENS:
            raise ValueError(
                f"the cache may hold at most {MAX_TOKENS} tokens (total_blocks x block_tokens)"
            )
        return self


class SpecDecodeParams(_Params):
    """Speculative decoding: each step a sequence gets 1..k+1 tokens."""

    enabled: bool = False
    draft_tokens: int = Field(4, ge=1, le=16, description="k: draft tokens proposed per step")
    draft_cost_ms: float = Field(1.0, ge=0, description="added to a step per draft token")
    acceptance_start: float = Field(0.8, ge=0, le=1, description="per-token acceptance at start")
    acceptance_end: float = Field(0.8, ge=0, le=1, description="acceptance after the drift")
    drift_start: float = Field(0.4, ge=0, le=1, description="answer fraction where drift begins")
    drift_end: float = Field(0.6, ge=0, le=1, description="answer fraction where drift ends")
    rejection_penalty_steps: int = Field(
        1, ge=0, le=8, description="steps lost after a draft whose first token is rejected"
    )

    @model_validator(mode="after")
    def _drift_in_order(self) -> SpecDecodeParams:
        if self.drift_end < self.drift_start:
            raise ValueError("drift_end must be >= drift_start")
        return self


class EmissionParams(_Params):
    """How generated tokens become SSE events."""

    tokens_per_event: int = Field(
        1, ge=1, description="an event goes out once it holds this many tokens"
    )
    head_burst_tokens: int = Field(
        0, ge=0, description="hold the first N tokens and release them at once (0: off)"
    )
    tail_interval_ms: float = Field(
        0.0, ge=0, description="after the head burst, at least this long per token (0: off)"
    )


class NetworkParams(_Params):
    """The per-connection delivery model between the engine and the client."""

    base_delay_ms: float = Field(0.0, ge=0, description="added to every event")
    jitter_ms: float = Field(0.0, ge=0, description="uniform 0..jitter added per event")
    coalesce_ms: float = Field(
        0.0, ge=0, description="Nagle-like: a write waits this long after the previous one"
    )
    hiccup_probability: float = Field(
        0.0, ge=0, le=1, description="chance per event that the connection freezes"
    )
    hiccup_min_ms: float = Field(500.0, ge=0, description="shortest freeze")
    hiccup_max_ms: float = Field(2000.0, ge=0, description="longest freeze")

    @model_validator(mode="after")
    def _hiccup_range(self) -> NetworkParams:
        if self.hiccup_max_ms < self.hiccup_min_ms:
            raise ValueError("hiccup_max_ms must be >= hiccup_min_ms")
        return self


class OutputParams(_Params):
    """Answer lengths and how prompts are counted."""

    min_tokens: int = Field(150, ge=1, le=MAX_TOKENS, description="shortest natural answer")
    max_tokens: int = Field(300, ge=1, le=MAX_TOKENS, description="longest natural answer")
    prompt_overhead_tokens: int = Field(
        8, ge=0, le=MAX_TOKENS, description="tokens the chat template adds to a prompt"
    )

    @model_validator(mode="after")
    def _range(self) -> OutputParams:
        if self.max_tokens < self.min_tokens:
            raise ValueError("max_tokens must be >= min_tokens")
        return self


class BackgroundParams(_Params):
    """Synthetic requests the engine makes itself, so one client can see others' effects."""

    every_ms: float = Field(0.0, ge=0, description="one background request this often (0: off)")
    first_at_ms: float = Field(0.0, ge=0, description="the first one, after the engine starts")
    max_alive: int = Field(1_000, ge=1, description="skip an arrival while this many are alive")
    prompt_tokens: int = Field(2_000, ge=1, le=MAX_TOKENS, description="prompt length of each")
    output_tokens: int = Field(32, ge=1, le=MAX_TOKENS, description="tokens each generates")


class FaultParams(_Params):
    """Faults applied to a share of requests (the ``X-Lab-Fault`` header does it per request)."""

    share: float = Field(1.0, ge=0, le=1, description="fraction of requests that get the faults")
    error_after: int | None = Field(None, ge=0, description="in-band error after N tokens")
    reset_after: int | None = Field(None, ge=0, description="TCP reset after N tokens")
    stall_after: int | None = Field(None, ge=0, description="stall after N tokens")
    stall_ms: float | None = Field(None, ge=0, description="stall length (None: forever)")
    slow_first_token_ms: float = Field(0.0, ge=0, description="delay before admission")
    echo_auth_after: int | None = Field(
        None, ge=0, description="after N tokens, an event echoing the Authorization header"
    )
    echo_auth_form: Literal["error", "malformed"] = Field(
        "error", description="the echo as an in-band error event, or as a broken chunk"
    )
    oversize_after: int | None = Field(None, ge=0, description="one oversized event after N")
    oversize_bytes: int = Field(
        4_194_304, ge=1, le=MAX_OVERSIZE_BYTES, description="the oversized event's size"
    )
    silent_finish_ms: float | None = Field(
        None, ge=0, description="silence after the finish chunk, before usage and [DONE]"
    )

    @model_validator(mode="after")
    def _one_ending(self) -> FaultParams:
        given = [
            name
            for name in ("error_after", "reset_after", "echo_auth_after")
            if getattr(self, name) is not None
        ]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)} cannot be combined")
        return self


class ServerParams(_Params):
    """What the HTTP face serves and keeps."""

    models: tuple[str, ...] = Field(("lab",), min_length=1, description="model names served")
    max_body_bytes: int = Field(1_048_576, ge=1_024, description="larger bodies get 413")
    keep_requests: int = Field(10_000, ge=1, description="ground-truth records kept")


class Scenario(_Params, metaclass=ConfigErrorWhenCalled):
    """A named, complete set of lab parameters."""

    name: str = "custom"
    description: str = ""
    label_min_ms: float = Field(
        1.0, ge=0, description="extra delay below this is not labelled with a cause"
    )
    scheduler: SchedulerParams = SchedulerParams()
    kv_cache: KvCacheParams = KvCacheParams()
    spec_decode: SpecDecodeParams = SpecDecodeParams()
    emission: EmissionParams = EmissionParams()
    network: NetworkParams = NetworkParams()
    output: OutputParams = OutputParams()
    background: BackgroundParams = BackgroundParams()
    faults: FaultParams = FaultParams()
    server: ServerParams = ServerParams()
