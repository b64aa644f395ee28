"""What every pydantic configuration here shares: the ``Duration``, ``Texts`` and ``Workers``
types, :class:`Screen` for values an error must not quote, and one describer.

The gateway's YAML file, the lab's scenarios and bench's options are pydantic models. They
read durations the same way (``1.5s``, ``400ms``, a bare number of seconds; held as integer
nanoseconds) and report what is wrong the same way: one line per problem, naming the key
and, for an unknown key, the keys accepted there (:func:`describe_errors`).

An error quotes the value it refused, and pydantic's own message does too; a value that may
hold a secret (a URL with a password, a key pasted where a variable's name goes, a header's
value) is checked by a :class:`Screen`, which puts a :class:`Refused` stand-in, showing no
secret, in the value's place before the error is raised.
"""

from __future__ import annotations

import math
import os
import re
import types
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, GetCoreSchemaHandler, ValidationError
from pydantic._internal._model_construction import ModelMetaclass
from pydantic_core import CoreSchema, core_schema

from steadystream._exceptions import ConfigError, SpecError
from steadystream._units import parse_duration

__all__ = [
    "Duration",
    "Refused",
    "Screen",
    "Texts",
    "Workers",
    "accepted_keys",
    "as_written",
    "describe_errors",
    "duration_text",
    "shown_url",
    "url_problem",
    "usable_cores",
    "yaml_key",
]

_DURATION_FORMS = "a duration is a number of seconds or a string like 1.5s or 400ms"


def _duration(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(_DURATION_FORMS)
    if isinstance(value, int | float):
        value = f"{value}s"
    if isinstance(value, str):
        try:
            return parse_duration(value, name="duration")
        except SpecError as exc:
            raise ValueError(str(exc).removeprefix("duration: ")) from None
    raise ValueError(_DURATION_FORMS)


Duration = Annotated[int, BeforeValidator(_duration)]
"""Nanoseconds, written as ``1.5s``, ``400ms`` or a number of seconds."""


def as_written(model: BaseModel) -> dict[str, Any]:
    """``model``'s fields as a file would say them, so that validating them again gives the
    same model: a :data:`Duration` (optional or not, in a nested model or not) is held in ns
    but a bare number reads as seconds, so it is written with its unit (``10000000000ns``),
    never as the number it holds."""
    data = model.model_dump()
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            data[name] = as_written(value)
        elif isinstance(value, tuple | list) and any(isinstance(v, BaseModel) for v in value):
            data[name] = [as_written(v) if isinstance(v, BaseModel) else v for v in value]
        elif isinstance(value, int) and _holds_duration(field.annotation, field.metadata):
            data[name] = f"{value}ns"
    return data


def _holds_duration(annotation: Any, metadata: Sequence[Any] = ()) -> bool:
    """Whether a field typed ``annotation`` (with ``metadata``, where pydantic moved an outer
    ``Annotated``'s) reads a :data:`Duration`: ``Duration | None`` keeps it in the union."""
    if any(getattr(rule, "func", None) is _duration for rule in metadata):
        return True
    if get_origin(annotation) is Annotated:
        return _holds_duration(get_args(annotation)[0], annotation.__metadata__)
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_holds_duration(arg) for arg in get_args(annotation))
    return False


class Refused:
    """What an error shows of a value a :class:`Screen` refused: ``repr`` is ``shown`` (a
    URL without its password), or nothing of the value where ``shown`` is None (a value that
    is, or may be, a secret). It stands in the value's place, so pydantic's own message, a
    traceback's cause, quotes no more than :func:`describe_errors` does."""

    __slots__ = ("problem", "shown")

    def __init__(self, problem: str, shown: str | None) -> None:
        self.problem, self.shown = problem, shown

    def __repr__(self) -> str:
        return "(not shown)" if self.shown is None else repr(self.shown)


@dataclass(frozen=True)
class Screen:
    """``Annotated`` metadata that checks a value before its type does: ``problem`` says what
    is wrong with it (None: nothing), and the error then quotes ``shown(value)``, or nothing
    where ``shown`` is None, never the value itself."""

    problem: Callable[[Any], str | None]
    shown: Callable[[str], str] | None = None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        # Two steps: an error's input is what the step that raised was given, so the
        # stand-in is made first and refused by the step inside it.
        refuse = core_schema.no_info_before_validator_function(_refuse, handler(source))
        return core_schema.no_info_before_validator_function(self._stand_in, refuse)

    def _stand_in(self, value: Any) -> Any:
        problem = self.problem(value)
        if problem is None:
            return value
        shown = self.shown(value) if self.shown is not None and isinstance(value, str) else None
        return Refused(problem, shown)


def _refuse(value: Any) -> Any:
    if isinstance(value, Refused):
        raise ValueError(value.problem)
    return value


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:/*)?.*@", re.DOTALL)
_QUERY = re.compile(r"([?#]).*", re.DOTALL)
# A registered name, IPv4 or the inside of an IPv6 literal (urllib strips the brackets).
_URL_HOST = re.compile(r"^[0-9A-Za-z._~%!$&'()*+,;=:-]+$")


def shown_url(url: str) -> str:
    """``url`` as an error may quote it: all before its last ``@`` (a user and password,
    whatever the scheme's spelling) and all after a ``?`` or ``#`` (a query's tokens) as
    ``***``: ``https://***@host/v1?***``."""
    return _QUERY.sub(r"\1***", _USERINFO.sub(lambda m: f"{m[1] or ''}***@", url, count=1))


def url_problem(
    url: str,
    schemes: Sequence[str],
    *,
    no_query: str | None = None,
    not_scheme: str | None = None,
) -> str | None:
    """What is wrong with ``url`` as a URL of one of ``schemes`` with a host (None: nothing);
    never quotes it. ``no_query``: why a query or fragment is refused (None: taken);
    ``not_scheme``: what to say of another scheme (default: which ones it must start with)."""
    if any(c.isspace() or not c.isprintable() for c in url):
        return "has a space or a control character"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:  # urllib's message may quote a part of a mangled password
        if "IPv6" in str(exc):
            return "not a URL (an unclosed [)"
        if "range" in str(exc):
            return "the port is out of range (1-65535)"
        return "the port is not a number"
    if parts.scheme not in schemes or not url[len(parts.scheme) :].startswith("://"):
        starts = " or ".join(f"{scheme}://" for scheme in schemes)
        return not_scheme or f"does not start with {starts}"
    if not parts.hostname or not _URL_HOST.fullmatch(parts.hostname):
        return "has no host, or a host that is not one"
    if port is not None and not 1 <= port <= 65535:
        return "the port is out of range (1-65535)"
    if no_query is not None and ("?" in url or "#" in url):
        return f"takes no query or fragment ({no_query})"
    return None


def _from_text(value: Any) -> Any:
    return (value,) if isinstance(value, str) else value


Texts = Annotated[tuple[str, ...], BeforeValidator(_from_text)]
"""The values of a repeatable option; one text given is one value (``("x",)``, not the
letters of ``"x"``)."""


_WORKERS_PER_CORE = 4
"""The most worker processes per core: one per core is the most that adds throughput, and a
number far past it is a typo that would fork the machine to a halt."""


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: its CPU affinity, and no more than its cgroup's CPU
    quota allows, rounded up (a container limited to 2 CPUs on a 64-core node gets 2)."""
    cores = max(1, len(os.sched_getaffinity(0)))
    quota = _cpu_quota(cgroup)
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def _cpu_quota(cgroup: Path) -> float | None:
    """CPUs' worth of time per period the cgroup allows (v2 ``cpu.max``, v1 ``cpu.cfs_*``),
    or None where there is no limit or nothing to read."""
    try:
        text = (cgroup / "cpu.max").read_text().split()
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
        return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _workers(value: Any) -> Any:
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value)  # from the command line (only 0-9: "²" and "١" are digits too)
    if value == "auto":
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("a whole number of processes (at least 1) or auto")
    most = _WORKERS_PER_CORE * usable_cores()
    if value > most:
        raise ValueError(
            f"{value} processes is more than {_WORKERS_PER_CORE} per core on this machine "
            f"(at most {most} for {usable_cores()} cores); auto gives one per core"
        )
    return value


Workers = Annotated[int | Literal["auto"], BeforeValidator(_workers)]
"""A number of worker processes, at most four per core, or ``auto`` (one per core)."""


def duration_text(ns: int) -> str:
    """A duration as people write it, exactly: ``400ms``, ``120s`` (for showing defaults)."""
    for unit, size in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns and ns % size == 0:
            return f"{ns // size}{unit}"
    return f"{ns}ns"


def yaml_key(loc: Sequence[str]) -> str:
    """How a key inside a configuration file is named: ``key 'watchdog.stall_timeout'``."""
    return f"key {'.'.join(loc) or '(top level)'!r}"


def describe_errors(
    exc: ValidationError,
    source: str,
    root: type[BaseModel],
    *,
    extra_keys: Sequence[str] = (),
    name: Callable[[Sequence[str]], str] = yaml_key,
) -> str:
    """One line for ``exc``: each problem with the key it is at, ``source`` first.

    ``extra_keys`` are keys ``root`` accepts that are not fields (a scenario's ``preset``);
    ``name`` says how a location is shown (a file's key, or a command's ``--option``).
    """
    lines = []
    errors = exc.errors()
    deeper = {tuple(e["loc"][:-1]) for e in errors if len(e["loc"]) > 1}
    for error in errors:
        loc = [str(part) for part in error["loc"]]
        if error["type"] == "too_short" and any(d[: len(loc)] == error["loc"] for d in deeper):
            continue  # a list whose items failed: the items' errors say why
        key = name(loc)
        if error["type"] == "extra_forbidden":
            accepted = accepted_keys(root, loc[:-1], extra_keys)
            lines.append(f"{key}: unknown key (accepted: {', '.join(accepted)})")
        elif error["type"] == "literal_error":
            expected = error.get("ctx", {}).get("expected", "")
            lines.append(f"{key}: got {error.get('input')!r} (accepted: {expected})")
        elif error["type"] == "missing":
            lines.append(f"{key}: required")
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
            lines.append(f"{key}: {message}{_got(error.get('input'))}")
    return f"{source}: " + "; ".join(lines)


def _got(value: Any) -> str:
    """The refused input as an error quotes it: not a secret a :class:`Screen` kept back, nor
    a whole mapping (a section, whose keys the message names; its values may be secrets)."""
    if isinstance(value, Mapping) or (isinstance(value, Refused) and value.shown is None):
        return ""
    return f" (got {value!r})"


def accepted_keys(
    root: type[BaseModel], parent: Sequence[str], extra_keys: Sequence[str] = ()
) -> list[str]:
    """The keys accepted at ``parent`` (a location inside ``root``; list indexes skipped)."""
    model = root
    for part in parent:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        inner = None if field is None else _model_in(field.annotation)
        if inner is None:
            break
        model = inner
    keys = list(model.model_fields)
    return [*keys, *extra_keys] if model is root else keys


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


class ConfigErrorWhenCalled(ModelMetaclass):
    """A model built by a caller (``Scenario(...)``, ``GatewayConfig(...)``) reports what is
    wrong as one :class:`ConfigError` naming each key, as a file does; ``model_validate``
    (files, presets, nested models) is left as pydantic's, so its callers name their own
    source. A metaclass, since pydantic routes ``model_validate`` through a model's own
    ``__init__``. (pydantic's ``ModelMetaclass`` is internal: its version is pinned.)"""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as exc:
            model = cast("type[BaseModel]", cls)
            # Not chained: pydantic's message quotes inputs whole (a list whose item failed,
            # a section a model check refused), secrets and all; this one names each problem.
            raise ConfigError(describe_errors(exc, cls.__name__, model)) from None
