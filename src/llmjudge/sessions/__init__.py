"""The sessions domain's public surface: what other domains may import."""

from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        "llmjudge.sessions.models": (
            "Comparison",
            "JudgeSession",
        ),
        "llmjudge.sessions.reads": ("list_sessions", "session_panels"),
        "llmjudge.sessions.schemas": (
            "SessionIn",
            "SessionOut",
        ),
        "llmjudge.sessions.service": ("create_session",),
    },
)
