"""Reading a batch job's result lines (``sessions.run.batches``): each line as the live
path's ``JudgeResult``, and a panel's lines as its members' votes, kept per comparison
until every member's job has ended (``PanelTally``), then ended by the live path's own
aggregation (``panel_judging.panel_finish``).

A panel's comparison is claimed once for all its members' jobs (one job per member model,
created together: ``batch_store.batch_group``). A member's line that did not parse or that
the provider refused is that member's ``missing`` vote with the reason, as a live call that
failed would be; the others' votes decide. A member's request that expired, was cancelled
or met a server error is asked again: live at once with ``batch_fallback`` = live (the
runner), else the comparison goes back to the queue for a later job while its attempts
last, then the member is missing with that reason.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from llmjudge.judging import JudgeResult, read_reply
from llmjudge.providers import BatchLine
from llmjudge.sessions.run.batch_store import StoredRequest
from llmjudge.sessions.run.claims import Claimed, Finish, JudgeVote, token
from llmjudge.sessions.run.judging import SessionConfig
from llmjudge.sessions.run.panel_judging import PanelConfig, member_vote, panel_finish

__all__ = ["PanelTally", "read_line"]

DELETED = "this member's model was deleted"


def read_line(line: BatchLine, cost: Any, reader: Any) -> JudgeResult[Any]:
    """A result line as the live path's result: the reply read by the session's reader and
    priced with ``cost`` (the batch price), or the line's error."""
    if line.result is None:
        return JudgeResult(error=line.error)
    reply = line.result
    return read_reply(
        reader,
        reply.text,
        logprobs=reply.logprobs,
        input_tokens=reply.input_tokens,
        output_tokens=reply.output_tokens,
        cached_input_tokens=reply.cached_input_tokens,
        cache_write_tokens=reply.cache_write_tokens,
        cost_usd=cost(
            reply.input_tokens,
            reply.output_tokens,
            reply.cached_input_tokens,
            reply.cache_write_tokens,
        ),
    )


class PanelTally:
    """The member votes of one group of a panel's jobs, by comparison and member."""

    def __init__(
        self, config: SessionConfig, panel: PanelConfig, max_attempts: int, *, again: bool
    ) -> None:
        self.config = config
        self.again = again  # False once the session is cancelled: nothing is asked again
        self.panel = panel
        self.max_attempts = max_attempts
        self.votes: dict[int, dict[int, JudgeVote]] = defaultdict(dict)
        self.retry: dict[int, dict[int, str]] = defaultdict(dict)  # member -> why
        # the votes each comparison's provider calls paid for (accounted once applied)
        self.paid: dict[int, list[JudgeVote]] = defaultdict(list)

    def line(self, request: StoredRequest, line: BatchLine, cost: Any) -> None:
        k, member = request.member, self.panel.members[request.member]
        if line.retry:
            self.retry[request.comparison_id][k] = line.error or "asked again"
            return
        vote = member_vote(read_line(line, cost, self.config.reader), k, member)
        self.votes[request.comparison_id][k] = vote
        if line.result is not None:
            self.paid[request.comparison_id].append(vote)

    def unanswered(self, request: StoredRequest, why: str, *, retry: bool) -> None:
        """A request the job returned no line for (``retry``: ask it again)."""
        if retry:
            self.retry[request.comparison_id][request.member] = why
        else:
            self.missing(request.comparison_id, request.member, why)

    def missing(self, comparison_id: int, k: int, why: str) -> None:
        member = self.panel.members[k]
        self.votes[comparison_id][k] = member_vote(JudgeResult(error=why), k, member)

    def asked_live(self, comparison_id: int, votes: list[JudgeVote]) -> None:
        """Votes of members asked again live (their calls are accounted by the gateway)."""
        for v in votes:
            self.votes[comparison_id][v.member] = v
            self.retry[comparison_id].pop(v.member, None)

    def finish(self, item: Claimed) -> Finish:
        """How ``item`` ends from its members' votes; back to the queue when a member must
        be asked again in a later job."""
        votes = self.votes[item.id]
        retry = self.retry.get(item.id)
        if retry and self.again and item.attempts < self.max_attempts:
            why = "; ".join(f"{self._name(k)}: {e}" for k, e in sorted(retry.items()))
            paid = self.paid.get(item.id, [])
            spend = {
                "input_tokens": sum(v.input_tokens for v in paid),
                "output_tokens": sum(v.output_tokens for v in paid),
                "cost_usd": sum(v.cost_usd for v in paid),
            }
            return Finish(
                **token(item),
                status="pending",
                answer=JudgeVote(**spend),
                error=f"asked again in a later batch job ({why})"[:2000],
            )
        for k, why in (retry or {}).items():
            self.missing(item.id, k, why)
        for k, m in enumerate(self.panel.members):
            if k not in votes:
                self.missing(item.id, k, DELETED if m.model_id is None else "no result")
        ordered = [votes[k] for k in range(len(self.panel.members))]
        return panel_finish(
            item, self.config, self.panel, ordered, len(ordered), None, None, self.max_attempts
        )

    def _name(self, k: int) -> str:
        return self.panel.members[k].label or f"member {k}"
