"""Pacer specs: parsing, display, and errors that name the parameter."""

from __future__ import annotations

import pytest

from steadystream import SpecError
from steadystream.shaping import PACERS, Leaky, Phrase, describe, format_spec, parse_spec
from tests.support.shaping import MS


def test_a_spec_selects_and_configures_a_pacer() -> None:
    pacer = parse_spec("leaky:interval=33ms,capacity=8")
    assert isinstance(pacer, Leaky)
    assert (pacer.interval_ns, pacer.capacity) == (33 * MS, 8)
    assert format_spec(pacer) == "leaky:interval=33ms"
    assert format_spec(pacer, full=True) == "leaky:interval=33ms,capacity=8,tail=300ms"


def test_defaults_come_from_the_pacing_strategies() -> None:
    assert parse_spec("leaky").settings() == {
        "interval_ns": 120 * MS,
        "capacity": 8,
        "tail_ns": 300 * MS,
    }
    adaptive = parse_spec("adaptive").settings()
    assert (adaptive["min_buffer"], adaptive["max_delay_ns"], adaptive["window"]) == (
        5,
        250 * MS,
        8,
    )
    assert adaptive["gain"] == 0.7
    phrase = parse_spec("phrase")
    assert isinstance(phrase, Phrase)
    assert (phrase.marks, phrase.words, phrase.cap, phrase.stagger_ns) == (
        ",.!?",
        ("and", "but", "or"),
        12,
        40 * MS,
    )
    assert parse_spec("flush").settings() == {"window_ns": 50 * MS}
    assert parse_spec("reading").settings()["rate"] == 8.0


def test_quoted_values_and_word_lists() -> None:
    pacer = parse_spec(' phrase : marks=",;", words = and|so , cap=6 ')
    assert isinstance(pacer, Phrase)
    assert (pacer.marks, pacer.words, pacer.cap) == (",;", ("and", "so"), 6)
    assert parse_spec(format_spec(pacer)).settings() == pacer.settings()


@pytest.mark.parametrize("name", sorted(PACERS))
def test_every_spec_round_trips(name: str) -> None:
    pacer = parse_spec(name)
    assert parse_spec(format_spec(pacer, full=True)).settings() == pacer.settings()
    assert format_spec(pacer) == name
    assert describe(pacer).splitlines()[0] == name


def test_describe_lists_each_parameter_with_its_meaning() -> None:
    lines = describe(Leaky).splitlines()
    assert lines[0] == "leaky"
    assert lines[1].split()[0] == "interval=120ms"
    assert "capacity=8" in lines[2]


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ("nope", ["'nope'", "leaky", "adaptive", "passthrough"]),
        ("leaky:speed=1", ["'speed'", "interval", "capacity", "tail"]),
        ("leaky:interval=fast", ["interval", "'fast'", "400ms"]),
        ("leaky:interval=3 parsecs", ["interval", "unit"]),
        ("leaky:interval=0ms", ["interval", "more than zero"]),
        ("leaky:capacity=x", ["capacity", "integer"]),
        ("leaky:capacity=0", ["capacity", ">= 1"]),
        ("leaky:capacity=2,capacity=3", ["capacity", "twice"]),
        ("leaky:capacity", ["'capacity'", "key=value"]),
        ("adaptive:gain=1.5", ["gain", "at most 1"]),
        ("adaptive:gain=nan", ["gain"]),
        ("reading:rate=-1", ["rate", "above 0"]),
        ('phrase:marks=",', ["marks", "not closed"]),
        ("phrase:cap=0", ["cap", ">= 1"]),
        ("rechunk:min_tokens=1.5", ["min_tokens", "integer"]),
        ("passthrough:x=1", ["'x'", "none"]),
    ],
)
def test_bad_specs_are_rejected_naming_the_parameter(spec: str, names: list[str]) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    message = str(caught.value)
    for name in names:
        assert name in message, message


def test_constructors_validate_too() -> None:
    with pytest.raises(SpecError, match="interval"):
        Leaky(interval_ns=-1)
    with pytest.raises(SpecError, match="words"):
        Phrase(words=("two words",))
