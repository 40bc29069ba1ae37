"""A panel's finish when no member answered: asked again while attempts remain, failed with
every member's error once they are spent (votes then kept), for voters and graders alike."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from llmjudge.sessions.run.claims import JudgeVote
from llmjudge.sessions.run.panel_judging import PanelConfig, panel_finish

MEMBERS: Any = (SimpleNamespace(weight=None), SimpleNamespace(weight=None))


def votes() -> list[JudgeVote]:
    return [
        JudgeVote(member=0, judge="one", error="timeout", input_tokens=10, cost_usd=0.1),
        JudgeVote(member=1, judge="two", error="no verdict", input_tokens=5, cost_usd=0.2),
    ]


@pytest.mark.parametrize(("grades", "verb"), [(False, "voted"), (True, "graded")])
@pytest.mark.parametrize(("attempts", "status"), [(1, "pending"), (3, "failed")])
def test_no_member_answered(grades: bool, verb: str, attempts: int, status: str) -> None:
    item: Any = SimpleNamespace(id=7, worker_id="w", attempts=attempts)
    config: Any = SimpleNamespace(verdict_format=SimpleNamespace(grades=grades))
    panel = PanelConfig(rule="median" if grades else "majority", members=MEMBERS)
    done = panel_finish(item, config, panel, votes(), 2, None, 1.5, max_attempts=3)
    assert done.status == status
    assert done.error == f"no member of the panel {verb} (one: timeout; two: no verdict)"
    assert (done.votes_cast, done.votes_asked) == (0, 2)
    assert len(done.votes) == (2 if status == "failed" else 0)
    # the spend of the calls made is kept either way
    assert (done.answer.input_tokens, done.answer.latency_s) == (15, 1.5)
    assert done.answer.cost_usd == pytest.approx(0.3)
