"""The judging domain's public surface: one judge call (request, transport, reader,
result) for every judge of the application."""

from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        "llmjudge.core.judging.calls": (
            "JudgeRequest",
            "JudgeResult",
            "LabelReader",
            "PairwiseReader",
            "Reader",
            "Reading",
            "Unreadable",
            "read_reply",
        ),
        "llmjudge.judging.pipeline": (
            "ChatGateway",
            "Cost",
            "Gateway",
            "Transport",
            "judge_call",
        ),
    },
)
