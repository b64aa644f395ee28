"""The option groups commands take whole: a command's parameter typed with one of these gets
all its options (:mod:`steadystream.cli._models` lays them out), and the group, built and
checked, when it runs.

Each field is a shared option of :mod:`steadystream._options`, so a group is a list of names:
``analyze`` and ``report`` take :class:`MetricSettings`, ``gate`` and ``whatif`` its
:class:`Thresholds`, ``analyze`` and ``explain`` :class:`FilesOnRay`, ``lab`` and ``replay``
:class:`Listen`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from steadystream._options import (
    FluidityDeadline,
    FluidityFirstDeadline,
    FluidityForm,
    Host,
    Port,
    QoeExpectedTtft,
    QoeForm,
    QoePace,
    RayAddress,
    RayFiles,
    StallThreshold,
    TtftTarget,
)

if TYPE_CHECKING:
    from steadystream.metrics import MetricConfig

__all__ = ["FilesOnRay", "Listen", "MetricSettings", "Thresholds"]

_FROZEN = ConfigDict(extra="forbid", frozen=True)


class Thresholds(BaseModel):
    """What a stall is, and the TTFT target of ITL goodput."""

    model_config = _FROZEN

    stall_threshold: StallThreshold
    ttft_target: TtftTarget

    def metric_config(self) -> MetricConfig:
        """These thresholds, the experience models at their defaults."""
        from steadystream.metrics import MetricConfig

        return MetricConfig(
            stall_threshold_ns=self.stall_threshold, ttft_target_ns=self.ttft_target
        )


class MetricSettings(Thresholds):
    """Everything metrics are measured against: the thresholds and the experience models."""

    qoe_expected_ttft: QoeExpectedTtft
    qoe_pace: QoePace
    qoe_form: QoeForm
    fluidity_first_deadline: FluidityFirstDeadline
    fluidity_deadline: FluidityDeadline
    fluidity_form: FluidityForm

    def metric_config(self) -> MetricConfig:
        """The :class:`~steadystream.metrics.MetricConfig` these settings say."""
        from steadystream.metrics import MetricConfig

        return MetricConfig(
            stall_threshold_ns=self.stall_threshold,
            ttft_target_ns=self.ttft_target,
            qoe_expected_ttft_ns=self.qoe_expected_ttft,
            qoe_pace_ns_per_token=self.qoe_pace,
            qoe_form=self.qoe_form,
            fluidity_prompt_deadline_ns=self.fluidity_first_deadline,
            fluidity_decode_deadline_ns=self.fluidity_deadline,
            fluidity_form=self.fluidity_form,
        )


class FilesOnRay(BaseModel):
    """Whether to read the files in Ray tasks, and on which cluster."""

    model_config = _FROZEN

    ray: RayFiles
    ray_address: RayAddress

    @property
    def on_ray(self) -> bool:
        """``--ray``, or ``--ray-address`` (which implies it)."""
        return self.ray or self.ray_address is not None


class Listen(BaseModel):
    """Where a server listens."""

    model_config = _FROZEN

    host: Host
    port: Port
