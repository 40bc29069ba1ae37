"""The judging domain's public surface: one judge call (request, transport, reader,
result) for every judge of the application."""

from llmjudge.core.judging.calls import (
    JudgeRequest,
    JudgeResult,
    LabelReader,
    PairwiseReader,
    Reader,
    Reading,
    Unreadable,
    read_reply,
)
from llmjudge.judging.pipeline import ChatGateway, Cost, Gateway, Transport, judge_call

__all__ = [
    "ChatGateway",
    "Cost",
    "Gateway",
    "JudgeRequest",
    "JudgeResult",
    "LabelReader",
    "PairwiseReader",
    "Reader",
    "Reading",
    "Transport",
    "Unreadable",
    "judge_call",
    "read_reply",
]
