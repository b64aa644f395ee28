"""How token counts were obtained shows in the metrics and the findings, truthfully."""

from __future__ import annotations

from steadystream import Event, EventKind, Timeline, TokenSource
from steadystream.findings import find
from steadystream.metrics import MetricConfig, fleet_metrics, stream_metrics, stream_table
from tests.support.timelines import MS, make_timeline


def paced_in_pieces(stream_id: str) -> Timeline:
    """Ten pieces 20 ms apart carrying five tokens: each token was cut in two."""
    events = [Event(0, "", 0, EventKind.ROLE)]
    events += [Event((100 + 20 * i) * MS, "ab", 1 - i % 2, EventKind.CONTENT) for i in range(10)]
    return Timeline.from_events(
        events,
        stream_id=stream_id,
        usage={"completion_tokens": 5},
        token_source=TokenSource.USAGE_SHARED,
    )


def test_pieces_of_tokens_are_text_events_and_the_total_is_kept() -> None:
    m = stream_metrics(paced_in_pieces("p"))
    assert (m.output_tokens, m.chunks, m.gaps) == (5, 10, 9)
    assert m.tokens_per_chunk == 0.5
    assert m.gap_p50_s is not None
    assert abs(m.gap_p50_s - 0.020) < 1e-9  # every piece the user saw makes a gap
    assert m.tpot_s is not None
    assert abs(m.tpot_s - 0.180 / 4) < 1e-9  # (e2el - ttft) / (tokens - 1): the real tokens


def test_the_findings_say_which_rule_applied() -> None:
    runs = [paced_in_pieces(f"p{i}") for i in range(3)]
    table = stream_table(runs)
    found = {f.code: f for f in find(table, fleet_metrics(table), MetricConfig())}
    assert "tokens-estimated" not in found  # the usage total was kept, not thrown away
    assert found["tokens-in-pieces"].streams == 3
    assert "The total is kept" in found["tokens-in-pieces"].message


def test_an_estimate_does_not_claim_what_it_cannot_know() -> None:
    estimated = make_timeline([100, 120, 140])
    estimated.token_source = TokenSource.ESTIMATED
    table = stream_table([estimated])
    (finding,) = [
        f for f in find(table, fleet_metrics(table), MetricConfig()) if f.code.startswith("tokens")
    ]
    assert finding.code == "tokens-estimated"
    assert "no usage reported" not in finding.message
    assert "no completion token count" in finding.message
