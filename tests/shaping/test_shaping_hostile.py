"""Pacers and the what-if against hostile input: odd parameters, odd timelines, odd text."""

from __future__ import annotations

import asyncio
import itertools
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from steadystream import Event, EventKind, FakeClock, Timeline
from steadystream._exceptions import InputError, SpecError
from steadystream.cli import _register, app
from steadystream.files import write_jsonl
from steadystream.shaping import (
    PACERS,
    Adaptive,
    Leaky,
    Pacer,
    Phrase,
    Reading,
    pace,
    parse_spec,
    simulate_run,
)
from steadystream.shaping._pieces import Item, text_cuts
from steadystream.shaping.base import DRAIN_GRAIN_NS, MAX_DURATION_NS
from steadystream.shaping.simulate import _Drive
from tests.support.shaping import MS, live

_register()
runner = CliRunner()

DEFAULTS = sorted(PACERS)


def _stream(*events: Event) -> Timeline:
    return Timeline.from_events(list(events), stream_id="hostile")


def _same_content(out: Timeline, source: Timeline) -> None:
    assert "".join(out.texts or []) == "".join(source.texts or [])
    assert int(out.tokens.sum()) == int(source.tokens.sum())
    assert int(out.text_bytes.sum()) == int(source.text_bytes.sum())
    assert np.all(np.diff(out.times) >= 0)


# -- an event that claims millions of tokens -----------------------------------------------


def test_cutting_an_event_of_billions_of_tokens_takes_memory_of_its_text_only() -> None:
    # A recorded event may claim up to 2**31 - 1 tokens: every cut precomputed took gigabytes.
    tokens = 3_000_000
    item = Item(Event(0, "only a few words", tokens), paced=True)
    tracemalloc.start()
    try:
        first = item.take(5, 1)
        rest = item.take(6, tokens - 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert first.text + rest.text == "only a few words"
    assert (first.tokens, rest.tokens) == (1, tokens - 1)
    assert peak < 1_000_000


def test_the_lazy_cuts_are_the_documented_rule() -> None:
    def reference(text: str, n: int) -> list[int]:
        length = len(text)
        if n <= 1:
            return [0, length] if n == 1 else [0]
        starts = [m.start() for m in re.finditer(r"\s*\S+", text)]
        if len(starts) >= n:
            starts[0] = 0
            starts.append(length)
            return [starts[i * (len(starts) - 1) // n] for i in range(n + 1)]
        return [i * length // n for i in range(n + 1)]

    texts = [
        "",
        "x",
        "  lead and trail  ",
        "unbelievable",
        "a b c d e f",
        "日本語のテキスト",
        "é 🇫🇷 👩‍👩‍👧",
    ]
    for text, n in itertools.product(texts, range(14)):
        assert text_cuts(text, n) == reference(text, n), (text, n)


@pytest.mark.parametrize("name", DEFAULTS)
def test_a_two_line_run_claiming_millions_of_tokens_simulates_quickly(name: str) -> None:
    # phrase staggered one token per release and the tail drain released one token per step:
    # millions of events (gigabytes) out of a two-line file.
    source = _stream(Event(0, "tiny text", 3_000_000), Event(MS, " end", 1))
    tracemalloc.start()
    try:
        run = simulate_run(source, parse_spec(name))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _same_content(run.timeline, source)
    assert len(run.timeline) < 1_000
    assert peak < 20_000_000


# -- the tail drain of many tokens ---------------------------------------------------------

_DRAINERS = [
    Leaky(capacity=100_000),
    Reading(buffer_ns=10_000 * MS),
    Adaptive(min_buffer=0, max_delay_ns=10_000 * MS),
    Phrase(cap=12),
]


@pytest.mark.parametrize("pacer", _DRAINERS, ids=lambda p: p.name)
def test_a_drain_of_many_tokens_leaves_in_one_millisecond_steps_within_the_tail(
    pacer: Pacer,
) -> None:
    source = _stream(Event(0, " many words here", 10_000))
    run = simulate_run(source, pacer, high_watermark=None)
    out = run.timeline
    _same_content(out, source)
    # At most one release per millisecond of tail, the last within the tail.
    assert len(out) <= pacer.tail_ns // DRAIN_GRAIN_NS + 2
    assert int(out.times[-1]) <= int(source.times[-1]) + pacer.tail_ns
    # The live driver releases the same pieces at the same times.
    released = live(source, pacer.fresh(), high_watermark=None)
    assert [e.time_ns for e in released] == out.times.tolist()
    assert [e.tokens for e in released] == out.tokens.tolist()
    assert [e.text for e in released] == out.texts


@pytest.mark.parametrize("pacer", _DRAINERS[:3], ids=lambda p: p.name)
def test_the_fast_simulation_drains_as_the_generic_one(pacer: Pacer) -> None:
    arrivals, sizes = [0, 2 * MS, 2 * MS], [7_000, 0, 3_000]
    fast = pacer.fresh()._run_stream(arrivals, sizes, None, None, 20)
    generic = _Drive(pacer.fresh(), None, 20)
    generic.run(arrivals, sizes, None)
    assert fast is not None
    assert fast.group_times == generic.group_times
    assert fast.group_ends == generic.group_ends


def test_a_phrase_one_event_took_past_the_cap_leaves_in_cap_releases() -> None:
    source = _stream(Event(0, " w" * 10, 1_000), Event(1000 * MS, ".", 1))
    out = simulate_run(source, Phrase(cap=4, stagger_ns=10 * MS)).timeline
    assert out.times.tolist()[:4] == [0, 10 * MS, 20 * MS, 30 * MS]
    assert out.tokens.tolist()[:4] == [250, 250, 250, 250]
    _same_content(out, source)


# -- parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Reading(rate=1e-300),  # its interval was infinite: OverflowError
        lambda: parse_spec("reading:rate=1e-300"),
        lambda: Reading(rate=10**400),  # past the float range: OverflowError
        lambda: Adaptive(gain=10**400),
        lambda: Phrase(words="and|but"),  # was read as its characters
        lambda: Phrase(words=None),  # type: ignore[arg-type]
        lambda: Phrase(words=[1, 2]),  # type: ignore[list-item]
        lambda: Phrase(words=("a|b",)),  # a spec reads it back as two words
    ],
)
def test_bad_parameters_are_refused_with_a_spec_error(make: object) -> None:
    with pytest.raises(SpecError):
        make()  # type: ignore[operator]


def test_the_slowest_reading_rate_still_fits_the_release_times() -> None:
    pacer = Reading(rate=1e-9, buffer_ns=MAX_DURATION_NS, tail_ns=MAX_DURATION_NS)
    assert pacer.interval_ns <= MAX_DURATION_NS
    source = _stream(Event(0, " a b c", 3), Event(MAX_DURATION_NS - 1, " d", 1))
    _same_content(simulate_run(source, pacer).timeline, source)


@pytest.mark.parametrize(
    "pacer",
    [
        Phrase(marks='"'),
        Phrase(marks=',"'),
        Phrase(marks='.!?"'),
        Phrase(words=("a,b",)),
        Phrase(words=('"x', 'y"')),
        Phrase(marks=",", words=()),
    ],
    ids=repr,
)
def test_every_pacer_spec_reads_back_to_the_same_pacer(pacer: Phrase) -> None:
    for full in (False, True):
        again = parse_spec(pacer.spec(full=full))
        assert again.settings() == pacer.settings()


def test_a_doubled_quote_inside_a_quoted_value_is_one_quote() -> None:
    pacer = parse_spec('phrase:marks=",""!",cap=3')
    assert isinstance(pacer, Phrase)
    assert (pacer.marks, pacer.cap) == (',"!', 3)
    with pytest.raises(SpecError, match="not closed"):
        parse_spec('phrase:marks="a""')


# -- timelines --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", DEFAULTS)
def test_times_past_two_to_the_62_are_refused_not_overflowed(name: str) -> None:
    late = 2**63 - 10
    source = _stream(Event(late - 5, " a", 1), Event(late, " b", 3))
    with pytest.raises(InputError, match="146 years"):
        simulate_run(source, parse_spec(name))


@pytest.mark.parametrize(
    "pacer",
    [
        Leaky(interval_ns=MAX_DURATION_NS, capacity=10**6, tail_ns=MAX_DURATION_NS),
        Adaptive(max_delay_ns=MAX_DURATION_NS, tail_ns=MAX_DURATION_NS),
        Phrase(stagger_ns=MAX_DURATION_NS, tail_ns=MAX_DURATION_NS),
        Reading(buffer_ns=MAX_DURATION_NS, tail_ns=MAX_DURATION_NS),
    ],
    ids=lambda p: p.name,
)
def test_the_latest_times_with_the_longest_durations_still_fit(pacer: Pacer) -> None:
    source = _stream(
        Event(-5, " a", 1),
        Event(MAX_DURATION_NS - 2, " b c", 2),
        Event(MAX_DURATION_NS - 1, ".", 1),
    )
    out = simulate_run(source, pacer).timeline
    _same_content(out, source)
    assert int(out.times[-1]) < 2**63


_TEXTS = ["e\u0301", "👩‍👩‍👧", "🇫🇷", "日本語", "ab", "\u200d", " and", ",", "ÅÄÖ.", "z\u0308\u0301"]


@pytest.mark.parametrize("name", DEFAULTS)
def test_multibyte_text_is_never_lost_duplicated_or_split_inside_a_character(name: str) -> None:
    events = [Event(0, "", 0, EventKind.ROLE)]
    for index, text in enumerate(_TEXTS * 4):
        events.append(Event(index // 3 * 7 * MS, text, 1 + index % 4))
    events.append(Event(200 * MS, "", 0, EventKind.USAGE))
    source = _stream(*events)
    out = simulate_run(source, parse_spec(name)).timeline
    _same_content(out, source)
    assert out.text_bytes.tolist() == [len(t.encode()) for t in out.texts or []]
    released = live(source, parse_spec(name))
    assert "".join(e.text for e in released) == "".join(source.texts or [])
    assert [e.time_ns for e in released] == out.times.tolist()


# -- the live driver under an endless burst -----------------------------------------------------


def test_a_stalled_consumer_stops_the_read_of_events_without_tokens() -> None:
    async def scenario() -> int:
        clock = FakeClock()
        pulled = 0

        async def source():  # type: ignore[no-untyped-def]
            nonlocal pulled
            yield Event(0, " hi", 1)
            for _ in range(10_000):  # bounded: an endless flood of keepalives
                pulled += 1
                yield Event(0, "", 0, EventKind.KEEPALIVE)
                await asyncio.sleep(0)

        paced = pace(source(), Leaky(), clock, high_watermark=50, low_watermark=20)
        assert (await anext(paced)).text == " hi"
        for _ in range(2_000):  # the consumer stops reading for a while
            await asyncio.sleep(0)
        seen = pulled
        # Once it reads again, everything comes through.
        rest = [event async for event in paced]
        assert len(rest) == 10_000
        return seen

    assert asyncio.run(scenario()) <= 52


# -- whatif -o -----------------------------------------------------------------------------------


def _recorded(path: Path) -> bytes:
    stream = _stream(*(Event(i * 30 * MS, f" w{i}", 1) for i in range(10)))
    write_jsonl(path, [stream], keep_text=True)
    return path.read_bytes()


def test_whatif_refuses_to_write_the_paced_run_over_the_recorded_one(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    recorded = _recorded(run)
    (tmp_path / "link.jsonl").hardlink_to(run)
    for target in (run, tmp_path / "link.jsonl"):
        result = runner.invoke(app, ["whatif", str(run), "-p", "leaky", "-o", str(target)])
        assert result.exit_code == 2, result.output
        assert "recorded runs" in result.output
    assert run.read_bytes() == recorded


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("missing/out.jsonl", "does not exist"),
        ("out.txt", "timeline file"),
        ("folder.jsonl", "folder"),
    ],
)
def test_whatif_refuses_an_unwritable_output_without_a_traceback(
    tmp_path: Path, target: str, words: str
) -> None:
    run = tmp_path / "run.jsonl"
    _recorded(run)
    (tmp_path / "folder.jsonl").mkdir()
    result = runner.invoke(app, ["whatif", str(run), "-p", "leaky", "-o", str(tmp_path / target)])
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
