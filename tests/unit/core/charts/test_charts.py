"""SVG charts: well-formed, accessible, escaped, counts match the data, deterministic."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import Markup

from llmjudge.core.charts import (
    DIVERGING,
    EMPTY_TEXT,
    MISSING_FILL,
    bar_chart,
    diverging_color,
    heatmap_chart,
    histogram_chart,
    line_chart,
    sparkline,
)

NS = "{http://www.w3.org/2000/svg}"
EVIL = "<script>alert(1)</script>"


def parse(svg: Markup) -> ET.Element:
    assert isinstance(svg, Markup)
    root = ET.fromstring(str(svg))
    assert root.tag == f"{NS}svg"
    assert root.get("role") == "img"
    assert "style" not in str(svg)  # a strict CSP blocks inline style attributes
    title = root.find(f"{NS}title")
    assert title is not None and root.get("aria-labelledby") == title.get("id")
    return root


def by_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in root.iter() if cls in (e.get("class") or "").split()]


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{NS}text")]


def assert_no_script(svg: Markup) -> None:
    root = parse(svg)
    assert not [e for e in root.iter() if e.tag.lower().endswith("script")]
    assert "<script" not in str(svg) and "&lt;script&gt;" in str(svg)


# --- histogram --------------------------------------------------------------------------------


def test_histogram_has_one_bar_per_bin_and_series_and_a_legend():
    series = {"gpt-4": [1, 4, 2], "claude": [0, 3, 5]}
    root = parse(histogram_chart(series, [1000, 1100, 1200, 1300], title="Elo", x_label="Elo"))
    bars = by_class(root, "bar")
    assert len(bars) == 6
    assert root.find(f"{NS}title").text == "Elo"
    assert {"gpt-4", "claude", "Elo", "Count"} <= set(texts(root))
    assert {"1000", "1300"} <= set(texts(root))
    # Taller bar for the larger count; the tooltip names series, count and bin.
    heights = [float(b.get("height")) for b in bars]
    assert heights[5] > heights[4] > heights[1] == 0.0  # claude: 0, 3, 5 in bin order
    assert bars[5].find(f"{NS}title").text == "claude: 5 in [1200, 1300)"
    # Same colour for a series in every bin, different between series.
    assert bars[0].get("fill") == bars[2].get("fill") != bars[1].get("fill")


def test_histogram_escapes_labels():
    svg = histogram_chart({EVIL: [1], "ok": [2]}, [0, 1], title=EVIL, x_label=EVIL)
    assert_no_script(svg)
    assert EVIL in texts(parse(svg))


def test_histogram_rejects_counts_that_do_not_match_bins():
    with pytest.raises(ValueError, match="3 bins"):
        histogram_chart({"a": [1, 2]}, [0, 1, 2, 3], title="t", x_label="x")


@pytest.mark.parametrize(("series", "edges"), [({}, [0, 1]), ({"a": []}, [0]), ({"a": []}, [])])
def test_histogram_empty_shows_placeholder(series, edges):
    root = parse(histogram_chart(series, edges, title="Elo", x_label="Elo"))
    assert EMPTY_TEXT in texts(root) and not by_class(root, "bar")


def test_histogram_all_zero_counts_still_draws_axes():
    root = parse(histogram_chart({"a": [0, 0]}, [0, 1, 2], title="t", x_label="x"))
    assert len(by_class(root, "bar")) == 2 and EMPTY_TEXT not in texts(root)


# --- heatmap ----------------------------------------------------------------------------------


def test_heatmap_cells_text_and_missing_cells():
    rows = ["a", "b"]
    cols = ["a", "b", "c"]
    values = [[None, 0.62, 0.1], [0.38, None, 0.9]]
    counts = [[0, 13, 4], [13, 0, 7]]
    root = parse(heatmap_chart(rows, cols, values, counts, title="Matrix"))
    cells = by_class(root, "cell")
    assert len(cells) == 6
    missing = by_class(root, "missing")
    assert len(missing) == 2 and all(c.get("fill") == MISSING_FILL for c in missing)
    t = texts(root)
    assert "62%" in t and "n=13" in t and "38%" in t and t.count("–") == 2
    assert cells[1].find(f"{NS}title").text == "a vs b: 62% (n=13)"
    # Below 0.5 leans orange, above leans blue.
    low, high = cells[2].get("fill"), cells[5].get("fill")
    assert int(low[1:3], 16) > int(low[5:7], 16) and int(high[5:7], 16) > int(high[1:3], 16)


def test_heatmap_without_counts_and_escaped_labels():
    svg = heatmap_chart([EVIL], ["x"], [[0.5]], None, title="m")
    assert_no_script(svg)
    t = texts(parse(svg))
    assert "50%" in t and not any(s.startswith("n=") for s in t)


def test_heatmap_shape_errors_and_empty():
    with pytest.raises(ValueError):
        heatmap_chart(["a"], ["a", "b"], [[0.5]], title="m")
    with pytest.raises(ValueError):
        heatmap_chart(["a"], ["a"], [[0.5]], [[1, 2]], title="m")
    root = parse(heatmap_chart([], [], [], title="m"))
    assert EMPTY_TEXT in texts(root) and not by_class(root, "cell")


def test_diverging_scale_is_centred_and_clamped():
    assert diverging_color(0.5) == DIVERGING[1]
    assert diverging_color(0.0) == diverging_color(-3) == DIVERGING[0]
    assert diverging_color(1.0) == diverging_color(7) == DIVERGING[2]
    # Symmetric distance from the centre gives equally strong (different) colours.
    assert diverging_color(0.2) != diverging_color(0.8)


# --- line chart -------------------------------------------------------------------------------


def test_line_chart_gaps_markers_and_target():
    series = {"F1": [0.5, 0.6, None, 0.75, 0.8], "recall": [0.4, 0.5, 0.6, 0.7, 0.9]}
    svg = line_chart(
        [1, 2, 3, 4, 5], series, title="F1", target=0.8, x_label="Iteration", y_label="Score"
    )
    root = parse(svg)
    # F1 is split by its gap into two 2-point lines; recall is one line.
    lines = by_class(root, "series-line")
    assert sorted(len(line.get("points").split()) for line in lines) == [2, 2, 5]
    assert len(by_class(root, "point")) == 9
    target = by_class(root, "target")[0].find(f"{NS}line")
    assert target.get("stroke-dasharray")
    assert {"target 80%", "Iteration", "Score", "F1", "recall", "0%", "100%"} <= set(texts(root))
    assert [t for t in texts(root) if t in {"1", "2", "3", "4", "5"}] == ["1", "2", "3", "4", "5"]


def test_line_chart_higher_values_are_drawn_higher():
    root = parse(line_chart([0, 1], {"a": [0.2, 0.9]}, title="t", x_label="x", y_label="y"))
    (line,) = by_class(root, "series-line")
    (x0, y0), (x1, y1) = (tuple(map(float, p.split(","))) for p in line.get("points").split())
    assert x1 > x0 and y1 < y0


def test_line_chart_single_point_and_equal_values_and_out_of_range():
    root = parse(line_chart([3], {"a": [0.7]}, title="t", x_label="x", y_label="y"))
    assert len(by_class(root, "point")) == 1 and not by_class(root, "series-line")
    flat = parse(
        line_chart([1, 2], {"a": [2.0, 2.0]}, title="t", x_label="x", y_label="y", y_min=2, y_max=2)
    )
    (line,) = by_class(flat, "series-line")
    ys = {p.split(",")[1] for p in line.get("points").split()}
    assert len(ys) == 1
    # Data above y_max widens the range instead of leaving the plot.
    wide = parse(line_chart([1, 2], {"a": [0.5, 1.5]}, title="t", x_label="x", y_label="y"))
    assert "150%" in texts(wide)


@pytest.mark.parametrize(("x", "series"), [([], {}), ([1, 2], {}), ([1, 2], {"a": [None, None]})])
def test_line_chart_empty(x, series):
    root = parse(line_chart(x, series, title="t", x_label="x", y_label="y"))
    assert EMPTY_TEXT in texts(root) and not by_class(root, "point")


def test_line_chart_rejects_mismatched_series():
    with pytest.raises(ValueError):
        line_chart([1, 2], {"a": [0.1]}, title="t", x_label="x", y_label="y")


# --- bar chart --------------------------------------------------------------------------------


def test_bar_chart_bars_errors_values_and_negative_values():
    labels = ["alpha", "beta", "gamma"]
    values = [0.4, -0.2, 0.1]
    errors = [(0.3, 0.5), (-0.35, -0.05), (0.0, 0.2)]
    root = parse(bar_chart(labels, values, title="BT", value_format="{:+.2f}", errors=errors))
    bars = by_class(root, "bar")
    assert len(bars) == 3 and len(by_class(root, "error-bar")) == 3
    assert [e.text for e in by_class(root, "value")] == ["+0.40", "-0.20", "+0.10"]
    zero = float(by_class(root, "zero")[0].get("x1"))
    a, b = bars[0], bars[1]
    assert float(a.get("x")) == pytest.approx(zero, abs=0.1)
    assert float(b.get("x")) + float(b.get("width")) == pytest.approx(zero, abs=0.1)
    assert float(a.get("width")) > float(b.get("width"))  # |0.4| > |-0.2|
    assert a.find(f"{NS}title").text == "alpha: +0.40 [+0.30, +0.50]"


def test_bar_chart_truncates_long_labels_with_full_title():
    long = "a very long pillar name that will not fit in the label column"
    root = parse(bar_chart([long], [0.5], title="t"))
    label = next(t for t in root.iter(f"{NS}text") if t.text and t.text.startswith("a very"))
    assert label.text.endswith("…") and len(label.text) < len(long)
    assert label.find(f"{NS}title").text == long
    assert "50%" in texts(root)


def test_bar_chart_empty_and_mismatch():
    root = parse(bar_chart([], [], title="t"))
    assert EMPTY_TEXT in texts(root) and not by_class(root, "bar")
    with pytest.raises(ValueError):
        bar_chart(["a"], [1.0, 2.0], title="t")
    with pytest.raises(ValueError):
        bar_chart(["a"], [1.0], title="t", errors=[])


def test_bar_chart_tiny_or_non_finite_values():
    # A range below float resolution still gets an axis (found by hypothesis).
    assert len(by_class(parse(bar_chart(["a"], [5e-324], title="t")), "bar")) == 1
    with pytest.raises(ValueError, match="finite"):
        bar_chart(["a"], [math.nan], title="t")
    with pytest.raises(ValueError, match="finite"):
        bar_chart(["a"], [0.5], title="t", errors=[(0.1, math.inf)])
    with pytest.raises(ValueError, match="finite"):
        histogram_chart({"a": [1]}, [0, math.nan], title="t", x_label="x")


def test_bar_chart_escapes_labels():
    assert_no_script(bar_chart([EVIL], [0.3], title="t"))


# --- sparkline --------------------------------------------------------------------------------


def test_sparkline():
    root = parse(sparkline([0.1, 0.3, None, 0.5, 0.8]))
    assert [len(p.get("points").split()) for p in by_class(root, "series-line")] == [2, 2]
    assert len(by_class(root, "point")) == 1  # the last value
    empty = parse(sparkline([]))
    assert EMPTY_TEXT in texts(empty)
    flat = parse(sparkline([3, 3, 3]))
    (line,) = by_class(flat, "series-line")
    assert len({p.split(",")[1] for p in line.get("points").split()}) == 1
    assert not by_class(parse(sparkline([1.0])), "series-line")


# --- properties -------------------------------------------------------------------------------

labels = st.text(min_size=0, max_size=40)


@settings(max_examples=40, deadline=None)
@given(
    names=st.lists(labels, min_size=1, max_size=5, unique=True),
    nbins=st.integers(1, 12),
    data=st.data(),
)
def test_histogram_any_labels_and_counts_are_well_formed_and_deterministic(names, nbins, data):
    series = {
        n: data.draw(st.lists(st.integers(0, 10_000), min_size=nbins, max_size=nbins))
        for n in names
    }
    edges = sorted(
        data.draw(st.lists(st.floats(-1e6, 1e6), min_size=nbins + 1, max_size=nbins + 1))
    )
    svg = histogram_chart(series, edges, title="t", x_label="x")
    assert svg == histogram_chart(series, edges, title="t", x_label="x")
    root = parse(svg)
    assert len(by_class(root, "bar")) == nbins * len(names)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    data=st.data(),
)
def test_heatmap_and_bars_any_values_are_well_formed(n, data):
    names = data.draw(st.lists(labels, min_size=n, max_size=n))
    cell = st.one_of(st.none(), st.floats(0, 1))
    values = [data.draw(st.lists(cell, min_size=n, max_size=n)) for _ in range(n)]
    root = parse(heatmap_chart(names, names, values, title="m"))
    assert len(by_class(root, "cell")) == n * n
    nums = data.draw(st.lists(st.floats(-1e3, 1e3), min_size=n, max_size=n))
    bars = parse(bar_chart(names, nums, title="b", value_format="{:.1f}"))
    assert len(by_class(bars, "bar")) == n
    for bar in by_class(bars, "bar"):
        assert all(math.isfinite(float(bar.get(k))) for k in ("x", "y", "width", "height"))
