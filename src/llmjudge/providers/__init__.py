"""The providers domain's public surface: what other domains may import."""

from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        "llmjudge.providers.base": (
            "ChatRequest",
            "CACHE_PRICE_SHARES",
            "ChatResult",
            "DeltaCallback",
            "ModelPricing",
            "ProviderError",
            "estimate_tokens",
        ),
        "llmjudge.providers.batches": (
            "BatchClient",
            "BatchLine",
            "RemoteBatch",
            "TERMINAL_STATES",
            "batch_unsupported",
        ),
        "llmjudge.providers.budget": ("BudgetExceeded", "Reservation"),
        "llmjudge.providers.llm": (
            "LLMService",
            "configured_latency_s",
        ),
        "llmjudge.providers.models": (
            "BATCH_DISCOUNT",
            "LLMCall",
            "LLMModel",
            "Provider",
        ),
        "llmjudge.providers.registry": ("gives_logprobs",),
        "llmjudge.providers.schemas": ("ModelOut",),
        "llmjudge.providers.service": (
            "BUILTIN_SIMULATED_MODELS",
            "ensure_builtin_simulator",
            "list_models",
            "totals",
        ),
    },
)
