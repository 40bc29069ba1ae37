"""The sessions domain's public surface: what other domains may import."""

from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        "llmjudge.sessions.models": (
            "Comparison",
            "JudgeSession",
            "ProviderBatch",
        ),
        # Batch jobs of other owners (a persona's training) use the sessions' batch steps.
        "llmjudge.sessions.run.batch_results": ("read_line",),
        "llmjudge.sessions.run.batch_steps": ("BatchSteps", "chat_request"),
        "llmjudge.sessions.run.batch_store": (
            "StoredBatch",
            "StoredRequest",
            "batch_by_id",
            "load_requests",
            "new_batch",
            "persona_batches",
            "store_requests",
            "update_batch",
        ),
        "llmjudge.sessions.run.batches": ("batch_status",),
        "llmjudge.sessions.reads": ("list_sessions", "session_panels"),
        "llmjudge.sessions.schemas": (
            "BatchOut",
            "SessionIn",
            "SessionOut",
        ),
        "llmjudge.sessions.service": ("create_session",),
    },
)
