"""Provider batch APIs: a second way to send judge calls (``sessions.run.batches``)."""

from __future__ import annotations

from llmjudge.providers.base import ProviderConfig
from llmjudge.providers.batches.anthropic import AnthropicBatches
from llmjudge.providers.batches.base import (
    TERMINAL_STATES,
    BatchClient,
    BatchLimits,
    BatchLine,
    RemoteBatch,
)
from llmjudge.providers.batches.openai import OpenAIBatches
from llmjudge.providers.clients import HttpChatClient

__all__ = [
    "BATCH_KINDS",
    "AnthropicBatches",
    "OpenAIBatches",
    "TERMINAL_STATES",
    "BatchClient",
    "BatchLimits",
    "BatchLine",
    "RemoteBatch",
    "batch_client",
    "batch_unsupported",
]

BATCH_KINDS: dict[str, type[BatchClient]] = {"openai": OpenAIBatches, "anthropic": AnthropicBatches}


def batch_unsupported(kind: str) -> str | None:
    """Why a provider kind cannot run batch jobs, or None when it can."""
    if kind in BATCH_KINDS:
        return None
    if kind == "simulator":
        return "the simulator has no batch API (it answers live only)"
    if kind == "gemini":
        return "llmjudge does not speak Gemini's batch API (it runs live only)"
    return f"provider kind {kind!r} has no batch API"


def batch_client(cfg: ProviderConfig, chat: HttpChatClient) -> BatchClient:
    """The batch client of ``cfg``'s kind over its live client's wire format."""
    return BATCH_KINDS[cfg.kind](cfg, chat)
