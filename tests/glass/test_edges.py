"""Client edge against glass edge: paint delays per token, frames with several tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from steadystream._types import Where
from steadystream.glass.edges import compare_edges, glass_pairs, paint_delays_ns, rendered_view
from steadystream.glass.harness import GlassError, page_url
from steadystream.timeline import Timeline
from tests.support.timelines import make_timeline

MS = 1_000_000


def page(
    stream_id: str, arrivals_ms: list[float], frames_ms: list[float], frame_tokens: list[int]
) -> tuple[Timeline, Timeline]:
    labels = {"renderer": "naive", "vantage": "browser"}
    client = make_timeline(arrivals_ms, stream_id=stream_id, role_ms=None, labels=labels)
    glass = make_timeline(
        frames_ms,
        stream_id=stream_id,
        tokens=frame_tokens,
        role_ms=None,
        labels=labels,
        where=Where.GLASS,
    )
    return client, glass


def test_paint_delay_is_paint_minus_arrival_token_by_token() -> None:
    client, glass = page("a", [10, 20, 21, 22], [16, 33], [1, 3])
    assert paint_delays_ns(client, glass).tolist() == [6 * MS, 13 * MS, 12 * MS, 11 * MS]


def test_tokens_never_painted_are_left_out() -> None:
    client, glass = page("a", [10, 20, 30], [16], [1])
    assert paint_delays_ns(client, glass).tolist() == [6 * MS]


def test_the_comparison_counts_frames_with_several_tokens_and_scores_both_edges() -> None:
    a = page("a", [10, 20, 21, 22], [16, 33], [1, 3])
    b = page("b", [10, 30], [16, 33], [1, 1])
    other = make_timeline([5, 6], stream_id="no-glass")
    comparison = compare_edges([*a, *b, other])
    assert comparison is not None
    assert comparison.streams == 2
    assert (comparison.frames, comparison.multi_token_frames) == (4, 1)
    assert comparison.multi_token_frame_share == pytest.approx(0.25)
    assert comparison.tokens_in_multi_token_frames_share == pytest.approx(3 / 6)
    delays = np.array([6, 13, 12, 11, 6, 3]) / 1e3
    assert comparison.paint_delay_p50_s == pytest.approx(np.percentile(delays, 50))
    assert comparison.paint_delay_max_s == pytest.approx(0.013)
    assert comparison.glass.streams == comparison.client.streams == 2
    assert comparison.glass.ttft_p50_s == pytest.approx(0.016)
    assert comparison.labels == {"renderer": "naive"}


def test_no_glass_means_no_comparison_and_the_page_client_is_preferred() -> None:
    assert compare_edges([make_timeline([5, 6])]) is None
    client, glass = page("a", [10, 20], [16, 33], [1, 1])
    bench_client = make_timeline([9, 19], stream_id="a")
    ((chosen, _),) = glass_pairs([bench_client, glass, client])
    assert chosen is client


def test_a_run_with_glass_is_described_by_its_glass_edge() -> None:
    client, glass = page("a", [10, 20], [16, 33], [1, 1])
    view, note = rendered_view([client, glass])
    assert view == [glass]
    assert note is not None
    assert "client" in note
    plain = [make_timeline([5, 6])]
    assert rendered_view(plain) == (plain, None)


def test_page_url_sets_api_keeps_the_query_and_refuses_a_missing_file(tmp_path: Path) -> None:
    html = tmp_path / "page.html"
    html.write_text("<!doctype html>")
    url = page_url(f"{html}?renderer=smooth&api=old", "http://127.0.0.1:9")
    assert url.startswith("file://")
    assert url.endswith("page.html?renderer=smooth&api=http%3A%2F%2F127.0.0.1%3A9")
    assert page_url("http://host/p?x=1", "http://a") == "http://host/p?x=1&api=http%3A%2F%2Fa"
    with pytest.raises(GlassError, match="no such file"):
        page_url(str(tmp_path / "missing.html"), "http://a")


def test_the_report_puts_both_edges_side_by_side_and_says_what_the_renderer_changed() -> None:
    from steadystream.report.build import build_report
    from steadystream.report.html import render_html

    def run(renderer: str, paint_ms: float) -> list[Timeline]:
        timelines: list[Timeline] = []
        for i in range(3):
            labels = {"renderer": renderer, "vantage": "browser"}
            arrivals = [100.0 + 20 * k for k in range(20)]
            frames = [paint_ms + t for t in arrivals]
            if renderer == "naive":
                frames[10] += 300  # a freeze the smoother would have hidden
            timelines.append(
                make_timeline(arrivals, stream_id=f"{renderer}-{i}", role_ms=None, labels=labels)
            )
            timelines.append(
                make_timeline(
                    sorted(frames),
                    stream_id=f"{renderer}-{i}",
                    role_ms=None,
                    labels=labels,
                    where=Where.GLASS,
                )
            )
        return timelines

    report = build_report(run("smooth", 250.0), baseline=run("naive", 5.0))
    assert report.edges is not None
    assert report.edges.columns == [
        "metric",
        "client (smooth)",
        "glass (smooth)",
        "client (naive)",
        "glass (naive)",
    ]
    assert "smooth's p99-of-p99 gap is" in report.edges.note
    assert "lower" in report.edges.note
    assert report.fleet.streams == 3  # the glass edge, not every vantage point pooled
    assert any("glass timelines" in line for line in report.run)
    assert 'id="edges"' in render_html(report)
