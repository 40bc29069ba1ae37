"""Server-rendered SVG charts: pure functions from data to `Markup`.

Every chart is a standalone `<svg role="img">` with a `<title>` (its accessible name), a
visible title, labelled axes and a legend where there is more than one series. Text from
users (pillar names...) is always escaped. No scripts and no `style` attributes (a strict
CSP blocks inline styles): only SVG presentation attributes and classes. The output is
deterministic: the same data gives the same bytes, so pages cache and tests compare.
Empty data never raises: the chart says "No data yet". Inconsistent shapes (a series whose
length does not match its bins) are programming errors and raise ValueError.

One module per chart family (histogram, heatmap, lines, bars), their shared scale, tick,
axis and escaping helpers in draw.py, round histogram bins in scales.py.
"""

from llmjudge.core.charts.bars import Panel, bar_chart, small_multiples_chart
from llmjudge.core.charts.draw import DIVERGING, EMPTY_TEXT, MISSING_FILL, PALETTE
from llmjudge.core.charts.heatmap import diverging_color, heatmap_chart
from llmjudge.core.charts.histogram import histogram_chart
from llmjudge.core.charts.lines import line_chart, sparkline

__all__ = [
    "DIVERGING",
    "EMPTY_TEXT",
    "MISSING_FILL",
    "PALETTE",
    "Panel",
    "bar_chart",
    "diverging_color",
    "heatmap_chart",
    "histogram_chart",
    "line_chart",
    "small_multiples_chart",
    "sparkline",
]
