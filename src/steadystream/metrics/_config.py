"""What the metrics are measured against: thresholds and the experience models' parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

from steadystream._units import MAX_DURATION_NS, format_duration

__all__ = ["MetricConfig"]


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """Thresholds and model parameters; defaults are the field's (docs/metrics.md#defaults)."""

    stall_threshold_ns: int = 400_000_000
    ttft_target_ns: int = 800_000_000
    jitter_flag: float = 5.0
    head_window_ns: int = 200_000_000
    qoe_expected_ttft_ns: int = 1_000_000_000
    qoe_pace_ns_per_token: int = 100_000_000  # 10 tokens/s, about 7.5 words/s
    qoe_form: str = "exact"  # or "discrete": the discrete form, for comparison
    fluidity_prompt_deadline_ns: int = 100_000_000
    fluidity_decode_deadline_ns: int = 50_000_000
    fluidity_form: str = "documented"  # or "code": one long gap counts as several misses

    def __post_init__(self) -> None:
        positive = (
            "stall_threshold_ns",
            "ttft_target_ns",
            "head_window_ns",
            "qoe_expected_ttft_ns",
            "qoe_pace_ns_per_token",
            "fluidity_prompt_deadline_ns",
            "fluidity_decode_deadline_ns",
        )
        for name in positive:
            value = getattr(self, name)
            if not _finite_above(value, 0):
                raise ValueError(
                    f"{name} must be a finite number of nanoseconds above 0, got {value!r}"
                )
            if value > MAX_DURATION_NS:
                raise ValueError(
                    f"{name} must be at most {MAX_DURATION_NS} ns (about 292 years), got {value!r}"
                )
            if not isinstance(value, Integral):
                # Whole nanoseconds, as times are: the deadline and reader recursions run in
                # int64, exactly, and a fraction would be cut off there (0.5 ns to 0).
                whole = round(value)
                if whole < 1:
                    raise ValueError(f"{name} must be 1 ns or more, got {value!r}")
                object.__setattr__(self, name, whole)
        if not _finite_above(self.jitter_flag, 1):
            raise ValueError(
                f"jitter_flag must be a finite number above 1, got {self.jitter_flag!r}"
            )
        if self.qoe_form not in ("exact", "discrete"):
            raise ValueError(f"qoe_form must be 'exact' or 'discrete', got {self.qoe_form!r}")
        if self.fluidity_form not in ("documented", "code"):
            raise ValueError(
                f"fluidity_form must be 'documented' or 'code', got {self.fluidity_form!r}"
            )

    def describe_models(self) -> str:
        """The experience models' parameters in words, for the reports that show their scores."""
        return (
            f"Andes QoE: first token expected at {format_duration(self.qoe_expected_ttft_ns)},"
            f" read at {format_duration(self.qoe_pace_ns_per_token)} a token"
            f" ({self.qoe_form} form); Etalon fluidity: deadlines"
            f" {format_duration(self.fluidity_prompt_deadline_ns)} for the first token,"
            f" {format_duration(self.fluidity_decode_deadline_ns)} after"
            f" ({self.fluidity_form} form)"
        )


def _finite_above(value: object, low: float) -> bool:
    # NaN compares false with everything, so "value <= 0" alone lets it through, and a
    # NaN threshold silently makes every stream good and none stalled (or the reverse).
    return (
        isinstance(value, Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and float(value) > low
    )
