"""A finding names its thread by the quoted title, linked on the page; the sentence after
the closing quote is not run into the title."""

from __future__ import annotations

from types import SimpleNamespace

from llmjudge.core.analysis.findings import surprise_findings
from llmjudge.core.analysis.outcomes import Outcome
from llmjudge.infra.web import templates


def test_a_cut_title_is_quoted_and_linked() -> None:
    title = "Q81 (writing): Compose an engaging travel blog post about a recent trip to\u2026"
    outcomes = [Outcome(i, 1, 2 + i % 3, "A") for i in range(9)] + [
        Outcome(10 + i, 2 + i % 3, 3 + (i + 1) % 3, "A" if i % 2 else "B") for i in range(9)
    ]
    pillar_of = dict.fromkeys(range(1, 6), 10)
    found = surprise_findings(
        outcomes, pillar_of, {10: "gpt-4"}, pillar_scores={10: 0.0}, thread_names={1: title}
    )
    mine = [f for f in found if f.thread_id == 1]
    assert mine and all(f.message.startswith(f"\u201c{title}\u201d ") for f in mine)
    label = SimpleNamespace(title=title, external_id="q81", pillar=SimpleNamespace(name="gpt-4"))
    html = templates.env.get_template("sessions/_finding_text.html").render(f=mine[0], label=label)
    assert html.strip().startswith(
        f'\u201c<a href="/threads/1" class="finding-thread">{title}</a>\u201d '
    ), html
