"""The demo's steps, each the command a user would run (see cli/demo.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from steadystream._exceptions import SteadystreamError
from steadystream._processes import Child, free_port, run_command, steadystream_command

__all__ = ["DemoPlan", "run_demo"]


@dataclass(frozen=True)
class DemoPlan:
    bench_ns: int  # each bench run
    scenario: str
    pacer: str
    report: Path
    workdir: Path
    seed: int
    concurrency: int


def run_demo(plan: DemoPlan, console: Console) -> None:
    from steadystream.shaping import parse_spec

    parse_spec(plan.pacer)  # a bad spec fails before anything starts
    plan.workdir.mkdir(parents=True, exist_ok=True)
    direct_run = plan.workdir / "direct.jsonl"
    paced_run = plan.workdir / "paced.jsonl"
    for stale in (direct_run, paced_run):
        stale.unlink(missing_ok=True)
    lab_port, gateway_port = free_port(), free_port()
    lab_url = f"http://127.0.0.1:{lab_port}/v1"
    gateway_url = f"http://127.0.0.1:{gateway_port}/v1"
    seconds = plan.bench_ns / 1e9

    step = _Steps(console)

    def lab() -> Child:
        # A fresh lab with the same seed for each run: the same arrivals get the same
        # answers and pauses, so the two runs differ by the gateway and its pacer only.
        return Child(
            "the lab",
            steadystream_command(
                "lab",
                "--scenario",
                plan.scenario,
                "--port",
                str(lab_port),
                "--seed",
                str(plan.seed),
            ),
            health_url=f"http://127.0.0.1:{lab_port}/healthz",
            log=plan.workdir / "lab.log",
        )

    step(f"lab engine, scenario [bold]{plan.scenario}[/], seed {plan.seed}, on {lab_url}")
    with lab() as direct_lab:
        console.print(f"   [dim]pid: lab {direct_lab.pid}[/]")
        step(f"bench the lab directly: {plan.concurrency} streams for {seconds:g}s")
        _bench(plan, lab_url, direct_run, [], plan.workdir / "bench-direct.log")
    step(f"a fresh lab (same seed) and the gateway in front of it, on {gateway_url}")
    gateway = Child(
        "the gateway",
        steadystream_command("gateway", "--upstream", lab_url, "--port", str(gateway_port)),
        health_url=f"http://127.0.0.1:{gateway_port}/healthz",
        log=plan.workdir / "gateway.log",
    )
    with lab() as paced_lab, gateway:
        console.print(f"   [dim]pids: lab {paced_lab.pid}, gateway {gateway.pid}[/]")
        step(f"bench through the gateway with pacer [bold]{plan.pacer}[/]")
        _bench(
            plan,
            gateway_url,
            paced_run,
            ["-H", f"X-Steadystream-Pacer: {plan.pacer}"],
            plan.workdir / "bench-paced.log",
        )
    step("servers stopped")

    step(f"report: the paced run against the direct one, with what-if pacers → {plan.report}")
    whatif = [plan.pacer, *(p for p in ("adaptive", "reading", "flush") if p != plan.pacer)]
    args = [
        "report",
        str(paced_run),
        "--baseline",
        str(direct_run),
        "-o",
        str(plan.report),
        "--title",
        f"steadystream demo: {plan.scenario} scenario, paced with {plan.pacer}",
    ]
    for spec in whatif:
        args += ["--whatif", spec]
    code = run_command(steadystream_command(*args), log=plan.workdir / "report.log", timeout_s=300)
    if code != 0:
        raise SteadystreamError(f"report failed (exit {code}); see {plan.workdir / 'report.log'}")
    _summary(console, direct_run, paced_run, plan)


class _Steps:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.count = 0

    def __call__(self, text: str) -> None:
        self.count += 1
        self.console.print(f"[bold cyan]{self.count}.[/] {text}")


def _bench(plan: DemoPlan, url: str, output: Path, extra: list[str], log: Path) -> None:
    seconds = plan.bench_ns / 1e9
    args = steadystream_command(
        "bench",
        url,
        "-m",
        "lab",
        "--concurrency",
        str(plan.concurrency),
        "--duration",
        f"{seconds:g}s",
        "--grace",
        "30s",
        "--seed",
        str(plan.seed),
        "-o",
        str(output),
        "--no-live",
        *extra,
    )
    code = run_command(args, log=log, timeout_s=seconds + 120)
    if code != 0:
        raise SteadystreamError(f"bench failed (exit {code}); see {log}")


_SUMMARY_ROWS = (
    "streams",
    "p99_of_worst_gap_s",
    "p99_of_p99_s",
    "goodput",
    "stalls_per_1k_tokens",
    "ttft_p95_s",
    "qoe_mean",
)


def _summary(console: Console, direct_run: Path, paced_run: Path, plan: DemoPlan) -> None:
    from steadystream.files import read_timelines
    from steadystream.metrics import FLEET_CATALOGUE, fleet_metrics

    direct = fleet_metrics(read_timelines(direct_run).timelines)
    paced = fleet_metrics(read_timelines(paced_run).timelines)

    table = Table(title="What the user felt", title_justify="left")
    table.add_column("metric")
    table.add_column("direct to the lab", justify="right")
    table.add_column(f"through the gateway, {plan.pacer}", justify="right")
    for name in _SUMMARY_ROWS:
        info = FLEET_CATALOGUE[name]
        table.add_row(info.label, info.show(getattr(direct, name)), info.show(getattr(paced, name)))
    console.print(table)
    console.print(f"report: [bold]{plan.report.resolve()}[/]  (runs and logs in {plan.workdir})")
