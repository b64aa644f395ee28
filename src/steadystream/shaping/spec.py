"""Pacer specs: one string that selects a pacer and sets its parameters.

Grammar (spaces around names and values are ignored)::

    spec    = name [ ":" setting { "," setting } ]
    setting = key "=" value
    value   = bare | '"' text '"'      (quote a value that holds a comma)

Examples: ``leaky``, ``leaky:interval=33ms,capacity=8``, ``phrase:marks=".!?",words=and|but``,
``reading:rate=6``. Durations take a unit (``120ms``, ``1.5s``, ``500us``; a bare number is
seconds); word lists are separated by ``|``. An unknown pacer or parameter, or a value that
cannot be read, raises :class:`~steadystream.SpecError` naming it and what is accepted.
"""

from __future__ import annotations

from typing import Any

from steadystream._exceptions import SpecError
from steadystream._units import parse_duration
from steadystream.shaping.adaptive import Adaptive
from steadystream.shaping.base import Pacer, Param
from steadystream.shaping.flush import Flush
from steadystream.shaping.leaky import Leaky
from steadystream.shaping.passthrough import Passthrough
from steadystream.shaping.phrase import Phrase
from steadystream.shaping.reading import Reading
from steadystream.shaping.rechunk import Rechunk

__all__ = ["PACERS", "describe", "format_spec", "parse_spec"]

PACERS: dict[str, type[Pacer]] = {
    cls.name: cls for cls in (Passthrough, Leaky, Adaptive, Phrase, Flush, Rechunk, Reading)
}
"""Every pacer a spec can name, by name."""

_KIND_HINTS = {
    "duration": "a duration like 120ms, 1.5s or 500us",
    "count": "an integer",
    "rate": "a number",
    "chars": "a string of characters",
    "words": "words separated by |",
}


def parse_spec(spec: str) -> Pacer:
    """The pacer a spec names, configured; raises :class:`SpecError` naming what is wrong."""
    name, _, body = spec.partition(":")
    name = name.strip().lower()
    cls = PACERS.get(name)
    if cls is None:
        raise SpecError(f"unknown pacer {name!r} in {spec!r} (accepted: {', '.join(PACERS)})")
    params = {param.name: param for param in cls.params}
    values: dict[str, Any] = {}
    for key, text in _settings(spec, body):
        param = params.get(key)
        if param is None:
            accepted = ", ".join(params) or "none"
            raise SpecError(f"{name}: unknown parameter {key!r} (accepted: {accepted})")
        if param.attr in values:
            raise SpecError(f"{name}: parameter {key!r} is given twice")
        values[param.attr] = _read_value(name, param, text)
    return cls(**values)


def format_spec(pacer: Pacer, *, full: bool = False) -> str:
    """The spec that makes ``pacer``: only settings that differ from the defaults, or all."""
    return pacer.spec(full=full)


def describe(pacer: Pacer | type[Pacer]) -> str:
    """One line per parameter: name, value (or default) and meaning, for help and reports."""
    cls = pacer if isinstance(pacer, type) else type(pacer)
    settings = pacer.settings() if isinstance(pacer, Pacer) else None
    lines = [cls.name]
    for param in cls.params:
        value = param.default if settings is None else settings[param.attr]
        lines.append(f"  {param.name}={param.format(value)}  {param.help}")
    return "\n".join(lines)


def _settings(spec: str, body: str) -> list[tuple[str, str]]:
    """Split ``key=value,key="a,b"`` into pairs, honouring quotes."""
    pairs: list[tuple[str, str]] = []
    position = 0
    body_len = len(body)
    while position < body_len:
        equals = body.find("=", position)
        comma = body.find(",", position)
        if equals < 0 or (0 <= comma < equals):
            end = comma if comma >= 0 else body_len
            piece = body[position:end].strip()
            if piece:
                raise SpecError(f"{spec!r}: setting {piece!r} needs key=value")
            position = end + 1
            continue
        key = body[position:equals].strip().lower()
        rest = equals + 1
        while rest < body_len and body[rest] == " ":
            rest += 1
        if rest < body_len and body[rest] == '"':
            value, close = _quoted(body, rest)
            if close < 0:
                raise SpecError(f"{spec!r}: the quoted value of {key!r} is not closed")
            after = body.find(",", close + 1)
            trailing = body[close + 1 : after if after >= 0 else body_len].strip()
            if trailing:
                raise SpecError(f"{spec!r}: unexpected {trailing!r} after the value of {key!r}")
        else:
            after = body.find(",", rest)
            value = body[rest : after if after >= 0 else body_len].strip()
        pairs.append((key, value))
        position = after + 1 if after >= 0 else body_len
    return pairs


def _quoted(body: str, opening: int) -> tuple[str, int]:
    """The quoted value that opens at ``opening`` (``""`` inside stands for one ``"``), and the
    position of its closing quote (-1: not closed)."""
    parts: list[str] = []
    position = opening + 1
    while True:
        close = body.find('"', position)
        if close < 0:
            return "", -1
        parts.append(body[position:close])
        if body.startswith('"', close + 1):  # a doubled quote: one quote, still inside
            parts.append('"')
            position = close + 2
            continue
        return "".join(parts), close


def _read_value(pacer: str, param: Param, text: str) -> Any:
    where = f"{pacer}: {param.name}"
    hint = _KIND_HINTS[param.kind]
    if param.kind == "duration":
        return parse_duration(text, name=where)
    if param.kind == "count":
        try:
            return int(text)
        except ValueError:
            raise SpecError(f"{where}: cannot read {text!r} (expected {hint})") from None
    if param.kind == "rate":
        try:
            return float(text)
        except ValueError:
            raise SpecError(f"{where}: cannot read {text!r} (expected {hint})") from None
    if param.kind == "words":
        return tuple(word.strip() for word in text.split("|") if word.strip())
    return text
