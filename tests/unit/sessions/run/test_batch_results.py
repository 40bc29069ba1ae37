"""A panel's batch result lines as its members' votes (``PanelTally``): a broken line is
that member's missing vote, an expired one sends the comparison back while its attempts
last, a cancelled session keeps what was answered. No database, no network."""

from __future__ import annotations

import json

import pytest

from llmjudge.providers.base import ChatResult, ModelPricing
from llmjudge.providers.batches import BatchLine
from llmjudge.sessions.run.batch_results import PanelTally
from llmjudge.sessions.run.batch_store import StoredRequest
from llmjudge.sessions.run.claims import Claimed
from llmjudge.sessions.run.judging import SessionConfig
from llmjudge.sessions.run.panel_judging import MemberConfig, PanelConfig

CONFIG = SessionConfig(1, ("quality",), None, None)
PRICES = ModelPricing(input_per_million=2.0, output_per_million=8.0)
PANEL = PanelConfig(
    "majority",
    (MemberConfig(11, "oa", PRICES), MemberConfig(12, "an", PRICES), MemberConfig(13, "x", PRICES)),
)


def verdict(winner: str) -> ChatResult:
    text = json.dumps({"winner": winner, "confidence": 0.9, "reasoning": "r"})
    return ChatResult(text, 100, 10, False, 0.0, 1)


def claimed(attempts: int) -> Claimed:
    return Claimed(7, 1, 0, 1, 2, 1, 2, 0, 0, False, attempts, "batch:3")


def request(k: int, attempts: int = 1) -> StoredRequest:
    return StoredRequest(f"c7-a{attempts}-m{k}", 7, attempts, k, {})


def half(i: int, o: int, c: int = 0, w: int = 0) -> float:
    return 0.5 * PRICES.cost(i, o, c, w)


def test_a_broken_line_is_that_members_missing_vote_and_the_others_decide() -> None:
    tally = PanelTally(CONFIG, PANEL, 3, again=True)
    tally.line(request(0), BatchLine("c7-a1-m0", result=verdict("B")), half)
    tally.line(request(1), BatchLine("c7-a1-m1", error="malformed batch result: {"), half)
    tally.line(request(2), BatchLine("c7-a1-m2", result=verdict("B")), half)
    f = tally.finish(claimed(1))
    assert (f.status, f.answer.winner, f.votes_cast, f.votes_asked) == ("completed", "B", 2, 3)
    assert [v.status for v in f.votes] == ["voted", "missing", "voted"]
    assert "malformed batch result" in (f.votes[1].error or "")
    # Each vote at its batch price, the comparison their sum; only answered lines are paid.
    assert f.votes[0].cost_usd == pytest.approx(0.5 * (100 * 2.0 + 10 * 8.0) / 1e6)
    assert f.answer.cost_usd == pytest.approx(2 * f.votes[0].cost_usd)
    assert [v.member for v in tally.paid[7]] == [0, 2]


def test_an_expired_request_sends_the_comparison_back_while_attempts_last() -> None:
    def tally_for(attempts: int, *, again: bool = True) -> PanelTally:
        tally = PanelTally(CONFIG, PANEL, 3, again=again)
        tally.line(request(0, attempts), BatchLine("", result=verdict("A")), half)
        tally.line(request(1, attempts), BatchLine("", error="expired", retry=True), half)
        tally.unanswered(request(2, attempts), "the batch job ended expired", retry=True)
        return tally

    f = tally_for(1).finish(claimed(1))
    assert f.status == "pending" and f.votes == ()
    assert "an: expired" in (f.error or "") and "x: the batch job ended expired" in (f.error or "")
    assert f.answer.cost_usd > 0  # the answered member's call still counts
    spent = tally_for(3).finish(claimed(3))  # attempts spent: the expired ones are missing
    assert (spent.status, spent.answer.winner, spent.votes_cast) == ("completed", "A", 1)
    assert [v.error for v in spent.votes[1:]] == ["expired", "the batch job ended expired"]
    cancelled = tally_for(1, again=False).finish(claimed(1))  # nothing is asked again
    assert (cancelled.status, cancelled.votes_cast) == ("completed", 1)


def test_members_asked_live_replace_their_retries() -> None:
    tally = PanelTally(CONFIG, PANEL, 3, again=True)
    for k in range(3):
        tally.line(request(k), BatchLine("", error="expired", retry=True), half)
    live = PanelTally(CONFIG, PANEL, 3, again=True)
    for k in range(3):
        live.line(request(k), BatchLine("", result=verdict("B")), half)
    tally.asked_live(7, list(live.votes[7].values()))
    f = tally.finish(claimed(1))
    assert (f.status, f.answer.winner, f.votes_cast) == ("completed", "B", 3)
    assert tally.paid.get(7, []) == []  # live calls are accounted by the gateway
