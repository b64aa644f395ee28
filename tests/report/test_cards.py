"""Headline cards: the fleet's numbers, the baseline, and a change judged by direction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from steadystream.metrics import FLEET_CATALOGUE, FleetMetrics, fleet_metrics
from steadystream.report.cards import Card, headline_cards
from tests.support.report import steady
from tests.support.timelines import reasoning_timeline

CARD_KEYS = [
    "ttft_p50_s",
    "ttft_p95_s",
    "p50_of_p99_s",
    "p99_of_p99_s",
    "p99_of_worst_gap_s",
    "goodput",
    "unstable_share",
    "stalls_per_1k_tokens",
]


@pytest.fixture(scope="module")
def fleet() -> FleetMetrics:
    runs = [steady(f"s{i}", [20.0] * 50 + ([900.0] if i == 0 else [])) for i in range(4)]
    return fleet_metrics(runs)


def test_cards_carry_the_fleet_numbers(fleet: FleetMetrics) -> None:
    cards = headline_cards(fleet)
    assert [c.key for c in cards] == CARD_KEYS
    for card in cards:
        assert card.value == getattr(fleet, card.key)
        assert card.baseline is None
        assert card.change is None
        assert card.verdict is None
        assert card.change_shown == "—"
    worst = cards[CARD_KEYS.index("p99_of_worst_gap_s")]
    assert worst.shown == "873.6ms"  # p99 across 4 streams of (900, 20, 20, 20) ms
    assert cards[CARD_KEYS.index("goodput")].shown == "75.0%"


def test_ttfr_cards_follow_ttft_only_where_streams_reasoned(fleet: FleetMetrics) -> None:
    assert "ttfr_p50_s" not in {c.key for c in headline_cards(fleet)}
    runs = [
        reasoning_timeline([300 + i], [1200 + i, 1220 + i], stream_id=f"r{i}") for i in range(3)
    ]
    reasoned = fleet_metrics(runs)
    keys = [c.key for c in headline_cards(reasoned)]
    assert keys[:4] == ["ttft_p50_s", "ttft_p95_s", "ttfr_p50_s", "ttfr_p99_s"]
    cards = {c.key: c for c in headline_cards(reasoned)}
    assert cards["ttfr_p50_s"].shown == "301.0ms"
    assert cards["ttft_p50_s"].shown == "1.20s"
    assert cards["ttfr_p50_s"].chart == "ttft"
    # A baseline that reasoned keeps the cards, to show that the reasoning went away.
    assert "ttfr_p99_s" in {c.key for c in headline_cards(fleet, reasoned)}


def test_change_is_judged_by_direction(fleet: FleetMetrics) -> None:
    better_baseline = replace(fleet, p99_of_worst_gap_s=0.02, goodput=1.0, ttft_p50_s=0.5)
    cards = {c.key: c for c in headline_cards(fleet, better_baseline)}
    worst = cards["p99_of_worst_gap_s"]
    assert worst.change == pytest.approx(fleet.p99_of_worst_gap_s - 0.02)
    assert worst.verdict == "worse"  # a longer freeze than before
    assert worst.change_shown == "+853.6ms (+4268%)"
    goodput = cards["goodput"]
    assert goodput.change == pytest.approx(-0.25)
    assert goodput.verdict == "worse"  # higher is better: it dropped
    assert goodput.change_shown == "−25.0 pts"
    ttft = cards["ttft_p50_s"]
    assert ttft.verdict == "better"  # 100 ms now, 500 ms before
    assert ttft.change_shown == "−400.0ms (−80%)"
    assert cards["unstable_share"].verdict == "same"
    assert cards["unstable_share"].change_shown == "no change"


P99 = FLEET_CATALOGUE["p99_of_p99_s"]


def test_small_changes_are_the_same() -> None:
    assert Card(P99, "", 0.1005, 0.1, "gap-cdfs").verdict == "same"
    assert Card(P99, "", 0.102, 0.1, "c").verdict == "worse"
    assert Card(FLEET_CATALOGUE["goodput"], "", 0.9, 0.8, "c").verdict == "better"
    # a metric with no better direction is never painted better or worse
    assert Card(FLEET_CATALOGUE["tokens_per_chunk_mean"], "", 3.0, 1.0, "c").verdict is None


def test_cards_read_their_words_from_the_catalogue(fleet: FleetMetrics) -> None:
    cards = {c.key: c for c in headline_cards(fleet)}
    assert cards["p99_of_worst_gap_s"].label == FLEET_CATALOGUE["p99_of_worst_gap_s"].header
    assert cards["goodput"].note == "streams with TTFT ≤ 800.0ms and no gap above 400.0ms"


def test_undefined_values_show_a_dash() -> None:
    card = Card(P99, "", None, 0.1, "c")
    assert card.shown == "—"
    assert card.change is None
    assert card.verdict is None
