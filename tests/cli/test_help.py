"""Every command's ``--help`` reads as people write commands: no typer artifacts."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from steadystream.cli import _COMMANDS, _register, app

_register()
runner = CliRunner()

# typer's own words for types (<bool>, <list[str]>, <path>, <int range>) ...
_TYPE_ARTIFACT = re.compile(r"<[a-zA-Z_]+(\[[a-zA-Z_]+\])?( range)?>")
# ... and its braces around a required argument in the usage line ({url}, {files}...)
_BRACED = re.compile(r"\{[a-z_]+\}")


def help_text(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", ["", *_COMMANDS])
def test_help_shows_no_python_types_and_no_braces(command: str) -> None:
    text = help_text(*filter(None, [command]))
    assert not _TYPE_ARTIFACT.search(text), _TYPE_ARTIFACT.search(text)
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert not _BRACED.search(usage), usage


def test_arguments_are_named_in_capitals_and_flags_take_no_value() -> None:
    assert "Usage: steadystream bench [OPTIONS] URL" in help_text("bench")
    assert "Usage: steadystream analyze [OPTIONS] FILES..." in help_text("analyze")
    assert "Usage: steadystream gate [OPTIONS] BASELINE CURRENT" in help_text("gate")
    for line in help_text("analyze").splitlines():
        if "--json" in line or "--help" in line:
            assert re.search(r"--(json|help)\s{2,}(Print|Show)", line), line


def test_values_are_named_by_what_they_are() -> None:
    assert re.search(r"--stall-threshold\s+DURATION", help_text("analyze"))
    assert re.search(r"--max-regression\s+-r\s+METRIC=LIMIT", help_text("gate"))
    assert re.search(r"--pacer\s+SPEC", help_text("gateway"))
    assert re.search(r"--endpoint\s+chat\|completions", help_text("bench"))
    assert re.search(r"--concurrency\s+INTEGER", help_text("bench"))


def test_a_docstring_paragraph_is_not_broken_where_the_source_wrapped_it() -> None:
    # bench's docstring breaks its line after "2 unusable input;" to fit 100 columns
    text = " ".join(help_text("bench").split("│"))
    assert "2 unusable input; 3 no stream succeeded" in text
