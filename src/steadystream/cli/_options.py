"""Option parsing shared by commands: durations, metric settings, errors turned into exits.

The options that set what metrics are measured against are declared once here
(:data:`StallThreshold` ... :data:`FluidityForm`) and read into a :class:`MetricConfig` by
:func:`metric_config`, so ``analyze`` and ``report`` take the same flags with the same help.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from steadystream._exceptions import SteadystreamError

if TYPE_CHECKING:
    from steadystream.metrics import MetricConfig

__all__ = [
    "DURATION",
    "FluidityDeadline",
    "FluidityFirstDeadline",
    "FluidityForm",
    "QoeExpectedTtft",
    "QoeForm",
    "QoePace",
    "RayAddress",
    "StallThreshold",
    "TtftTarget",
    "duration_ns",
    "exit_on_error",
    "metric_config",
    "print_error",
]

DURATION = "DURATION"
"""How ``--help`` names a duration's value: written ``400ms``, ``1.5s``, ``2m``."""

RayAddress = Annotated[
    str | None,
    typer.Option(
        metavar="ADDRESS",
        help="The Ray cluster to run on (implies --ray), e.g. ray://head:10001.",
    ),
]
StallThreshold = Annotated[
    str,
    typer.Option(metavar=DURATION, help="A gap above this is a stall (and breaks ITL goodput)."),
]
TtftTarget = Annotated[str, typer.Option(metavar=DURATION, help="TTFT target for ITL goodput.")]
QoeExpectedTtft = Annotated[
    str,
    typer.Option(
        metavar=DURATION, help="Andes QoE: when the reader expects the first token (T_e)."
    ),
]
QoePace = Annotated[
    str,
    typer.Option(
        metavar=DURATION,
        help="Andes QoE: the reader's time per token (L); 100ms reads 10 tokens/s.",
    ),
]
QoeForm = Annotated[
    str,
    typer.Option(
        metavar="exact|discrete",
        help="Andes QoE: 'exact' (the reader model) or 'discrete' (docs/metrics.md#qoe).",
    ),
]
FluidityFirstDeadline = Annotated[
    str,
    typer.Option(
        metavar=DURATION,
        help="Etalon fluidity: the first token's deadline from the request (D_p).",
    ),
]
FluidityDeadline = Annotated[
    str,
    typer.Option(metavar=DURATION, help="Etalon fluidity: each later token's deadline (D_d)."),
]
FluidityForm = Annotated[
    str,
    typer.Option(
        metavar="documented|code",
        help="Etalon fluidity: 'documented' (the paper, one miss per late token) or 'code' "
        "(Etalon's code: a late token misses one deadline per D_d it overran).",
    ),
]

_FORMS = {"--qoe-form": ("exact", "discrete"), "--fluidity-form": ("documented", "code")}

EXIT_USAGE = 2  # unusable input: a bad file, option or configuration


def duration_ns(value: str, name: str, *, positive: bool = False) -> int:
    """Parse a duration option (``400ms``, ``1.5s``) or exit naming the option;
    ``positive``: zero (or what rounds to it) is refused too."""
    from steadystream._units import parse_duration

    try:
        ns = parse_duration(value, name=name)
    except SteadystreamError as exc:
        raise typer.BadParameter(str(exc), param_hint=name) from exc
    if positive and ns <= 0:
        raise typer.BadParameter(f"{value!r}: must be above zero", param_hint=name)
    return ns


@contextmanager
def exit_on_error() -> Iterator[None]:
    """Print a steadystream error as one clear line and exit 2, without a traceback."""
    try:
        yield
    except SteadystreamError as exc:
        print_error(str(exc))
        raise typer.Exit(EXIT_USAGE) from exc


def print_error(message: str) -> None:
    """``error: MESSAGE`` on stderr, one line however long (a pipe has no width to fit)."""
    from rich.markup import escape

    from steadystream.cli._console import console

    # Escaped: a message may hold brackets ("pip install 'steadystream[ray]'", a path)
    # that rich would otherwise take for markup and drop.
    console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)


def metric_config(
    *,
    stall_threshold: str,
    ttft_target: str,
    qoe_expected_ttft: str,
    qoe_pace: str,
    qoe_form: str,
    fluidity_first_deadline: str,
    fluidity_deadline: str,
    fluidity_form: str,
) -> MetricConfig:
    """The :class:`MetricConfig` the options say, or exit naming the option that is wrong."""
    from steadystream.metrics import MetricConfig

    for option, form in (("--qoe-form", qoe_form), ("--fluidity-form", fluidity_form)):
        if form not in _FORMS[option]:
            accepted = " or ".join(repr(known) for known in _FORMS[option])
            raise typer.BadParameter(f"{form!r}: must be {accepted}", param_hint=option)
    durations = {
        "--stall-threshold": stall_threshold,
        "--ttft-target": ttft_target,
        "--qoe-expected-ttft": qoe_expected_ttft,
        "--qoe-pace": qoe_pace,
        "--fluidity-first-deadline": fluidity_first_deadline,
        "--fluidity-deadline": fluidity_deadline,
    }
    ns = {option: duration_ns(value, option, positive=True) for option, value in durations.items()}
    return MetricConfig(
        stall_threshold_ns=ns["--stall-threshold"],
        ttft_target_ns=ns["--ttft-target"],
        qoe_expected_ttft_ns=ns["--qoe-expected-ttft"],
        qoe_pace_ns_per_token=ns["--qoe-pace"],
        qoe_form=qoe_form,
        fluidity_prompt_deadline_ns=ns["--fluidity-first-deadline"],
        fluidity_decode_deadline_ns=ns["--fluidity-deadline"],
        fluidity_form=fluidity_form,
    )
