"""How every command's ``--help`` reads: values named as people write them, no typer artifacts.

Left alone, typer shows each option's Python type (``--json <bool>``, ``--label <list[str]>``)
and a required argument in braces (``Usage: steadystream bench [OPTIONS] {url}``). Here a flag
shows no value at all, an option shows its ``metavar`` (``DURATION``, ``SPEC``) or else the
word for its type (``TEXT``, ``INTEGER``, ``PATH``), and an argument shows its name in capitals
(``URL``, ``FILES...``), optional ones in brackets, as POSIX usage lines write them. Help text
is one paragraph per blank-line-separated block, so a docstring's line breaks (made to fit
the source's 100 columns) do not break lines in the middle of a sentence.

Only typer is imported here, so ``--help`` stays instant (STYLE.md 11).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, get_args, get_origin

import typer.core

if TYPE_CHECKING:
    from typer._click import Context  # the click that typer carries, as its own classes take

__all__ = ["HelpCommand", "HelpGroup"]

# The word for each type an option can take, as click names them.
_TYPE_WORDS = {str: "TEXT", int: "INTEGER", float: "FLOAT", Path: "PATH", PurePath: "PATH"}
_LINE_BREAK = re.compile(r"(?<!\n)\n(?!\n)")


class _Argument(typer.core.TyperArgument):
    """An argument shown by its name alone: ``FILES...`` in the usage line and the panel."""

    def display_type_rich(self, ctx: Context) -> str | None:
        return None

    def get_usage_pieces(self, ctx: Context) -> list[str]:
        name = self.display_name_raw
        return [name if self.required else f"[{name}]"]


def _value_word(param: typer.core.TyperOption) -> str:
    """What the option's value is called when its definition does not say."""
    annotation: Any = param.type_descriptor.annotation
    if get_origin(annotation) is list:  # a repeatable option: each value is one element
        (annotation,) = get_args(annotation)
    return _TYPE_WORDS.get(annotation, "VALUE")


def _tidy(params: list[Any]) -> None:
    for param in params:
        if isinstance(param, typer.core.TyperArgument):
            if param.metavar is None:
                many = "..." if param.nargs != 1 else ""
                param.metavar = (param.name or "value").upper() + many
            # typer makes its parameters itself and offers no hook to choose their class;
            # _Argument adds no state, only how an argument is shown.
            param.__class__ = _Argument
        elif isinstance(param, typer.core.TyperOption) and param.metavar is None:
            param.metavar = "" if param.is_flag else _value_word(param)


def _tidied(option: typer.core.TyperOption | None) -> typer.core.TyperOption | None:
    if option is not None:
        _tidy([option])
    return option


def _paragraphs(text: str | None) -> str | None:
    """Help text with the source's line breaks inside paragraphs taken out."""
    if text is None:
        return None
    return _LINE_BREAK.sub(" ", inspect.cleandoc(text))


class HelpCommand(typer.core.TyperCommand):
    """A command whose help names values as people write them (see the module's docstring)."""

    def __init__(self, name: str | None, **kwargs: Any) -> None:
        kwargs["help"] = _paragraphs(kwargs.get("help"))
        super().__init__(name, **kwargs)
        _tidy(self.params)

    def get_help_option(self, ctx: Context) -> typer.core.TyperOption | None:
        return _tidied(super().get_help_option(ctx))  # click makes --help when first asked


class HelpGroup(typer.core.TyperGroup):
    """The ``steadystream`` command itself, shown as its commands are."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _tidy(self.params)

    def get_help_option(self, ctx: Context) -> typer.core.TyperOption | None:
        return _tidied(super().get_help_option(ctx))  # click makes --help when first asked
