"""Which client serves each provider kind: the one place that knows every concrete client.

``base`` holds only the contracts, so the clients (which import ``base``) and this registry
(which imports the clients) form no cycle, and a new kind is one ``register`` call away.
"""

from __future__ import annotations

from collections.abc import Callable

from llmjudge.providers.anthropic import AnthropicClient
from llmjudge.providers.base import ProviderClient, ProviderConfig
from llmjudge.providers.gemini import GeminiClient
from llmjudge.providers.openai import OpenAIClient
from llmjudge.providers.simulator import SimulatorClient

ClientFactory = Callable[[ProviderConfig], ProviderClient]

_FACTORIES: dict[str, ClientFactory] = {
    "openai": OpenAIClient,
    "anthropic": AnthropicClient,
    "gemini": GeminiClient,
    "simulator": SimulatorClient,
}


# Kinds whose clients return token log probabilities (``ChatRequest.top_logprobs``):
# OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp's server). Anthropic and
# Gemini have none to give; the simulator does not model them.
_LOGPROBS = frozenset({"openai"})


def gives_logprobs(kind: str) -> bool:
    """Whether a provider of ``kind`` can answer with token log probabilities."""
    return kind in _LOGPROBS


def register(kind: str, factory: ClientFactory) -> None:
    """Serve ``kind`` with ``factory`` (replacing any earlier one for that kind)."""
    _FACTORIES[kind] = factory


def kinds() -> frozenset[str]:
    return frozenset(_FACTORIES)


def make_client(cfg: ProviderConfig) -> ProviderClient:
    """A fresh client for ``cfg``; ValueError for a kind nothing serves."""
    factory = _FACTORIES.get(cfg.kind)
    if factory is None:
        raise ValueError(f"unknown provider kind: {cfg.kind!r}")
    return factory(cfg)
