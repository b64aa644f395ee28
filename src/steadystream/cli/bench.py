"""``steadystream bench``: load an OpenAI-compatible endpoint and record every stream.

The options are :class:`~steadystream.bench.config.BenchConfig`'s fields, each with its
:class:`~steadystream.bench.config.Flag`: this module turns them into typer parameters and
adds only what is about showing (``--live``, ``--json``). The work is in ``_bench_run``.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer
from pydantic.fields import FieldInfo

from steadystream._validation import duration_text
from steadystream.bench.config import OUTPUT, BenchConfig, Flag
from steadystream.cli import app
from steadystream.cli._options import DURATION

__all__ = ["bench"]

_PLAIN = (bool, int, float, str, Path)


def _cli_type(info: FieldInfo, flag: Flag) -> Any:
    """The type typer parses the option as: the field's own when plain, else text."""
    annotation = info.annotation
    optional = get_origin(annotation) in (Union, UnionType) and NoneType in get_args(annotation)
    if optional:
        annotation = next(a for a in get_args(annotation) if a is not NoneType)
    if get_origin(annotation) in (tuple, list, dict):
        return list[str] | None  # repeatable; None: not given, the field's default holds
    kind = str if flag.text or annotation not in _PLAIN else annotation
    return kind | None if optional else kind


def _metavar(info: FieldInfo, flag: Flag) -> str | None:
    """How ``--help`` names the value: the flag's word, a duration, or the accepted words."""
    if flag.metavar is not None:
        return flag.metavar
    if flag.text:
        return DURATION
    annotation = info.annotation
    union = get_origin(annotation) in (Union, UnionType)
    kinds = get_args(annotation) if union else (annotation,)
    literal = next((kind for kind in kinds if get_origin(kind) is Literal), None)
    return None if literal is None else "|".join(get_args(literal))


def _parameter(name: str, info: FieldInfo) -> inspect.Parameter:
    flag = next(m for m in info.metadata if isinstance(m, Flag))
    kind = _cli_type(info, flag)
    repeatable = get_origin(kind) is UnionType and get_origin(get_args(kind)[0]) is list
    default: Any = inspect.Parameter.empty  # required
    if repeatable:
        default = None  # not given: the field's default holds
    elif not info.is_required():
        default = info.get_default(call_default_factory=True)
    if flag.text and isinstance(default, int):
        default = duration_text(default)  # nanoseconds, shown and read back as 400ms
    if flag.argument:
        typer_info: Any = typer.Argument(help=flag.help, show_default=False)
    else:
        typer_info = typer.Option(
            *flag.names,
            metavar=_metavar(info, flag),
            help=flag.help,
            rich_help_panel=flag.panel,
        )
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[kind, typer_info],
    )


_SHOWING = [
    inspect.Parameter(
        "live",
        inspect.Parameter.KEYWORD_ONLY,
        default=True,
        annotation=Annotated[
            bool, typer.Option(help="Show the live view (on a terminal).", rich_help_panel=OUTPUT)
        ],
    ),
    inspect.Parameter(
        "json_output",
        inspect.Parameter.KEYWORD_ONLY,
        default=False,
        annotation=Annotated[
            bool, typer.Option("--json", help="Print the summary as JSON.", rich_help_panel=OUTPUT)
        ],
    ),
]


def bench(**given: Any) -> None:
    """Load an endpoint, record every stream's timeline, and summarise the jitter.

    Exit codes: 0 done; 1 the gate failed or no sweep load met the SLO; 2 unusable input;
    3 no stream succeeded, or the server could not be reached; 4 the gate had too few streams
    to judge; 130 interrupted (what finished is kept).
    """
    from steadystream.cli._bench_run import execute

    live, json_output = given.pop("live"), given.pop("json_output")
    options = {name: value for name, value in given.items() if value is not None}
    code = execute(options, live=live, json_output=json_output)
    if code:
        raise typer.Exit(code)


_PARAMETERS = [_parameter(n, i) for n, i in BenchConfig.model_fields.items()] + _SHOWING
bench.__signature__ = inspect.Signature(_PARAMETERS)  # type: ignore[attr-defined]
bench.__annotations__ = {p.name: p.annotation for p in _PARAMETERS} | {"return": None}
app.command()(bench)
