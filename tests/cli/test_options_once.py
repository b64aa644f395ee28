"""One definition of each shared option: every command's options come from models' fields, an
option two commands share is one :class:`Flag` (help, metavar, default), and a bad value is
one message naming the option, exit 2."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadystream._flags import Flag
from steadystream.cli import _register, app
from steadystream.cli._models import option_fields, option_flag, shown_name

_register()
runner = CliRunner()

SRC = Path(__file__).parents[2] / "src" / "steadystream"

# Options that have one name but say something else in each command that has them: how many
# definitions each has, and why. Any other option two commands take is one definition.
OWN_MEANINGS = {
    "--output": (5, "what is written: bench's run, report's HTML, whatif's paced runs, ..."),
    "--seed": (5, "what is seeded: bench's arrivals, the lab's pauses, replay's draws, ..."),
    "--pacer": (3, "whatif compares several; the gateway paces with one; demo's gateway run"),
    "--ray": (2, "bench spreads its streams over actors; analyze and explain read files"),
    "--host": (2, "gateway's override its configuration's; lab's and replay's bind"),
    "--port": (2, "gateway's override its configuration's; lab's and replay's bind"),
    "--workers": (2, "bench's Ray actors; the gateway's processes"),
    "--record": (2, "the lab appends ground truth to a file; the gateway rotates files in DIR"),
    "--scenario": (2, "the lab takes a preset or a file; demo a preset, another default"),
    "--timeout": (2, "bench's read timeout; glass's deadline of a whole run"),
    "--duration": (2, "how long bench sends; demo's bench time in all"),
    "--engine-metrics": (2, "bench scrapes them; explain reads them"),
}
# The command line's only option outside the models: the root's eager --version.
BY_HAND = {"cli/_models.py", "cli/__init__.py"}


def commands() -> dict[str, dict[str, tuple[Flag, object, tuple[str, ...]]]]:
    """Command -> option -> (its flag, its default, its names), from the registered commands."""
    found = {}
    for info in app.registered_commands:
        assert info.callback is not None
        options = {}
        for field, field_info in option_fields(info.callback).items():
            flag = option_flag(field_info)
            if not flag.argument:
                default = field_info.get_default(call_default_factory=True)
                options[shown_name(field, field_info)] = (flag, default, flag.names)
        found[info.callback.__name__] = options
    return found


def test_no_command_declares_an_option_by_hand() -> None:
    by_hand = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("Option", "Argument")
                and isinstance(node.value, ast.Name)
                and node.value.id == "typer"
                and where not in BY_HAND
            ):
                by_hand.append(f"{where}:{node.lineno}")
    assert not by_hand, "typer options declared outside cli/_models.py: " + ", ".join(by_hand)


def test_every_command_takes_its_options_from_models() -> None:
    made = {info.callback.__name__ for info in app.registered_commands if info.callback}
    assert made == set(commands())
    assert len(made) == len(app.registered_commands) == 11


def test_an_option_two_commands_share_is_one_definition() -> None:
    flags: dict[str, list[Flag]] = defaultdict(list)
    defaults: dict[str, set[str]] = defaultdict(set)
    for options in commands().values():
        for name, (flag, default, _) in options.items():
            if not any(flag is seen for seen in flags[name]):
                flags[name].append(flag)
            defaults[name].add(repr(default))
    wrong = {}
    for name in flags:
        expected = OWN_MEANINGS.get(name, (1, ""))[0]
        if len(flags[name]) != expected:
            wrong[name] = f"{len(flags[name])} definitions, expected {expected}"
        elif expected == 1 and len(defaults[name]) != 1:
            wrong[name] = f"one definition, defaults {sorted(defaults[name])}"
    assert not wrong, wrong


def test_the_shared_options_are_shared() -> None:
    taken = commands()
    stall = {taken[c]["--stall-threshold"][0] for c in taken if "--stall-threshold" in taken[c]}
    assert len(stall) == 1
    assert {c for c in taken if "--stall-threshold" in taken[c]} == {
        "analyze",
        "bench",
        "explain",
        "gate",
        "report",
        "whatif",
    }
    for option in ("--json", "--ray-address", "--ttft-target", "--qoe-form", "--max-regression"):
        users = [c for c in taken if option in taken[c]]
        assert len(users) >= 2, option
        assert len({taken[c][option][0] for c in users}) == 1, option


def test_a_short_name_means_one_option_everywhere() -> None:
    long_of: dict[str, set[str]] = defaultdict(set)
    for options in commands().values():
        for name, (_, _, names) in options.items():
            for short in (n for n in names if not n.startswith("--")):
                long_of[short].add(name)
    assert {short: longs for short, longs in long_of.items() if len(longs) > 1} == {}


@pytest.mark.parametrize(
    ("args", "option", "says"),
    [
        (["analyze", "run.jsonl", "--stall-threshold", "nope"], "--stall-threshold", "nope"),
        (["report", "run.jsonl", "--qoe-form", "x"], "--qoe-form", "'exact' or 'discrete'"),
        (["report", "run.jsonl", "--fluidity-form", "x"], "--fluidity-form", "'documented'"),
        (["gate", "a.jsonl", "b.jsonl", "--ttft-target", "0"], "--ttft-target", "above zero"),
        (["whatif", "run.jsonl", "--stall-threshold", "-1s"], "--stall-threshold", "'-1s'"),
        (["explain", "run.jsonl", "--worst", "-1"], "--worst", "greater than or equal to 0"),
        (["analyze", "run.jsonl", "--qoe-pace", "0ms"], "--qoe-pace", "above zero"),
        (["replay", "run.jsonl", "--port", "99999"], "--port", "65535"),
        (["replay", "run.jsonl", "--stall-limit", "soon"], "--stall-limit", "'soon'"),
        (["glass", "page.html", "--replay", "r.jsonl", "--timeout", "x"], "--timeout", "'x'"),
    ],
)
def test_a_bad_value_is_one_message_naming_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], option: str, says: str
) -> None:
    monkeypatch.chdir(tmp_path)  # no file is read: the options are refused first
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    text = " ".join(result.output.replace("│", " ").split())
    assert text.count("Invalid value") == 1, text
    assert re.search(f"Invalid value for '?{option}'?:", text), text  # click quotes a range's
    assert says in text


def test_benchs_shared_options_are_refused_as_its_own_are(tmp_path: Path) -> None:
    args = ["bench", "http://127.0.0.1:9/v1", "-m", "lab", "-o", str(tmp_path / "r.jsonl")]
    result = runner.invoke(app, [*args, "--stall-threshold", "0"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == ["error: --stall-threshold: must be above zero (got '0')"]
