"""The judging domain's public surface: one judge call (request, transport, reader,
result) for every judge of the application."""

from llmjudge.core.judging import calls
from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        # the core's judge-call values, exactly as the core module lists them
        "llmjudge.core.judging.calls": calls.__all__,
        "llmjudge.judging.pipeline": (
            "ChatGateway",
            "Cost",
            "Gateway",
            "Transport",
            "at_batch_price",
            "judge_call",
        ),
    },
)
