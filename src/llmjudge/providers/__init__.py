"""The providers domain's public surface: what other domains may import."""

from llmjudge.providers.base import (
    ChatResult,
    DeltaCallback,
    ModelPricing,
    ProviderError,
    estimate_tokens,
)
from llmjudge.providers.budget import BudgetExceeded
from llmjudge.providers.llm import LLMService, configured_latency_s
from llmjudge.providers.models import LLMCall, LLMModel, Provider
from llmjudge.providers.schemas import ModelOut
from llmjudge.providers.service import (
    BUILTIN_SIMULATED_MODELS,
    ensure_builtin_simulator,
    list_models,
    totals,
)

__all__ = [
    "BUILTIN_SIMULATED_MODELS",
    "BudgetExceeded",
    "ChatResult",
    "DeltaCallback",
    "LLMCall",
    "LLMModel",
    "LLMService",
    "ModelOut",
    "ModelPricing",
    "Provider",
    "ProviderError",
    "configured_latency_s",
    "ensure_builtin_simulator",
    "estimate_tokens",
    "list_models",
    "totals",
]
