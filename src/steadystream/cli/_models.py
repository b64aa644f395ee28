"""Every command's options are pydantic fields: this module turns them into typer parameters.

A command is a function whose keyword parameters are option groups (pydantic models: bench's
:class:`~steadystream.bench.config.BenchConfig`, the groups of :mod:`steadystream.cli._groups`)
and its own few options, each annotated with a :class:`~steadystream._flags.Flag` (often a
shared one of :mod:`steadystream._options`)::

    @app.command()
    @model_options
    def gate(
        *,
        baseline: Annotated[Path, Flag("The reference run (timeline file).", argument=True)],
        thresholds: Thresholds,
        json_output: JsonOutput,
    ) -> None: ...

:func:`model_options` lays the groups' fields and the own options out as typer's parameters,
in the order written: each with its flag's names, help, panel (a
:class:`~steadystream._flags.Panel` on the group or the field overrides it) and metavar, and
its default (a duration shown as it is typed, ``400ms``). When the command runs, each group is
built from what was parsed, and the own options are checked as one more model, so the
function gets models and checked values (a duration as integer nanoseconds). A value a model
refuses is one usage error naming the option, exit 2 (``Invalid value for --stall-threshold:
'0': must be above zero``); a steadystream error a model raises itself (bench's, for options
that exclude each other) is printed as one line, exit 2.

Only typer and pydantic are imported here, so ``--help`` stays instant (STYLE.md 11).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import annotated_types
import typer
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from steadystream._flags import DURATION, Flag, Panel, option_name
from steadystream._validation import duration_text
from steadystream.cli._errors import exit_on_error

__all__ = ["model_options", "option_fields", "option_flag", "shown_name"]

_PLAIN = (bool, int, float, str, Path)
_Model = TypeVar("_Model", bound=BaseModel)
_FIELDS = "_option_fields"


def model_options(function: Callable[..., None]) -> Callable[..., None]:
    """``function`` as typer reads a command: its groups' fields and own options flattened."""
    hints = get_type_hints(function, include_extras=True)
    own: dict[str, Any] = {}
    layout: list[tuple[str, type[BaseModel] | None, Panel | None]] = []
    for name, parameter in inspect.signature(function).parameters.items():
        group, panel = _group_of(hints[name])
        if group is None:
            empty = parameter.default is inspect.Parameter.empty
            own[name] = hints[name] if empty else (hints[name], parameter.default)
        layout.append((name, group, panel))
    options = create_model(
        f"{function.__name__}_options", __config__=ConfigDict(extra="forbid"), **own
    )
    fields: dict[str, FieldInfo] = {}
    parameters = []
    for name, group, panel in layout:
        model = options if group is None else group
        for field in [name] if group is None else list(group.model_fields):
            if field in fields:
                raise TypeError(f"{function.__name__}: two options named {field!r}")
            fields[field] = model.model_fields[field]
            parameters.append(_parameter(field, fields[field], panel))

    def command(**given: Any) -> None:
        checked = _build(options, {name: given[name] for name in own})
        values = {}
        for name, group, _ in layout:
            if group is None:
                values[name] = getattr(checked, name)
            else:
                values[name] = _build(group, {f: given[f] for f in group.model_fields})
        function(**values)

    command.__name__ = function.__name__
    command.__qualname__ = function.__qualname__
    command.__module__ = function.__module__
    command.__doc__ = function.__doc__
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    setattr(command, _FIELDS, fields)
    return command


def option_fields(command: Callable[..., None]) -> dict[str, FieldInfo]:
    """The fields a command made by :func:`model_options` takes, by parameter name."""
    fields: dict[str, FieldInfo] = getattr(command, _FIELDS)
    return fields


def option_flag(info: FieldInfo) -> Flag:
    """The :class:`Flag` a field shows with (every option field has one)."""
    return next(m for m in info.metadata if isinstance(m, Flag))


def _group_of(annotation: Any) -> tuple[type[BaseModel] | None, Panel | None]:
    """The model ``annotation`` names, when it is a group, and the panel it is placed in."""
    panel = None
    if get_origin(annotation) is Annotated:
        annotation, *metadata = get_args(annotation)
        panel = next((m for m in reversed(metadata) if isinstance(m, Panel)), None)
    group = (
        isinstance(annotation, type)
        and get_origin(annotation) is None
        and issubclass(annotation, BaseModel)
    )
    return (annotation, panel) if group else (None, None)


def _build(model: type[_Model], given: Mapping[str, Any]) -> _Model:
    """``model`` from the parsed values, or exit 2 naming the option that is wrong."""
    # None: not given, so the field's default holds
    values = {name: value for name, value in given.items() if value is not None}
    with exit_on_error():  # a model's own SteadystreamError: one line
        try:
            return model(**values)
        except ValidationError as exc:
            raise _usage_error(exc.errors()[0], model) from None


def _usage_error(error: ErrorDetails, model: type[BaseModel]) -> typer.BadParameter:
    """The first problem, as click says a bad value: ``Invalid value for --flag: ...``."""
    field = str(error["loc"][0]) if error["loc"] else ""
    info = model.model_fields.get(field)
    hint = None if info is None else shown_name(field, info)
    value = error.get("input")
    if error["type"] == "literal_error":
        message = f"{value!r}: must be {error.get('ctx', {}).get('expected', '')}"
    else:
        said = str(error["msg"]).removeprefix("Value error, ")
        message = said if repr(value) in said else f"{value!r}: {said}"
    return typer.BadParameter(message, param_hint=hint)


def shown_name(field: str, info: FieldInfo) -> str:
    """How the command line names a field: ``--stall-threshold``, or ``FILES``."""
    flag = option_flag(info)
    if flag.argument:
        return field.upper()
    return next((name for name in flag.names if name.startswith("--")), option_name(field))


def _cli_type(info: FieldInfo, flag: Flag) -> Any:
    """The type typer parses the option as: the field's own when plain, else text."""
    annotation = info.annotation
    optional = get_origin(annotation) in (Union, UnionType) and NoneType in get_args(annotation)
    if optional:
        annotation = next(a for a in get_args(annotation) if a is not NoneType)
    if get_origin(annotation) in (tuple, list, dict):
        items = () if get_origin(annotation) is dict else get_args(annotation)
        item = items[0] if items and items[0] in _PLAIN else str  # a mapping: KEY=VALUE texts
        many = list.__class_getitem__(item)
        return many if flag.argument else many | None  # None: not given, the default holds
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


def _range(info: FieldInfo, kind: Any) -> tuple[int | None, int | None]:
    """An integer bounded on both sides shows its range, as typer's ``min``/``max`` do."""
    lows = [m.ge for m in info.metadata if isinstance(m, annotated_types.Ge)]
    highs = [m.le for m in info.metadata if isinstance(m, annotated_types.Le)]
    if kind is not int or not lows or not highs:
        return None, None
    low, high = lows[0], highs[0]
    return (low, high) if isinstance(low, int) and isinstance(high, int) else (None, None)


def _parameter(name: str, info: FieldInfo, placed: Panel | None) -> inspect.Parameter:
    flag = option_flag(info)
    kind = _cli_type(info, flag)
    repeatable = get_origin(kind) is UnionType and get_origin(get_args(kind)[0]) is list
    default: Any = inspect.Parameter.empty  # required
    if repeatable:
        default = None  # not given: the field's default holds
    elif not info.is_required():
        default = info.get_default(call_default_factory=True)
    if flag.text and isinstance(default, int):
        default = duration_text(default)  # nanoseconds, shown and read back as 400ms
    if placed is None:
        placed = next((m for m in reversed(info.metadata) if isinstance(m, Panel)), None)
    if flag.argument:
        typer_info: Any = typer.Argument(help=flag.help, show_default=False)
    else:
        low, high = _range(info, kind)
        typer_info = typer.Option(
            *flag.names,
            metavar=_metavar(info, flag),
            help=flag.help,
            rich_help_panel=flag.panel if placed is None else placed.name,
            min=low,
            max=high,
        )
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[kind, typer_info],
    )
