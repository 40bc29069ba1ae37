"""The sessions domain's public surface: what other domains may import."""

from llmjudge.sessions.models import Comparison, JudgeSession
from llmjudge.sessions.reads import list_sessions
from llmjudge.sessions.schemas import SessionIn, SessionOut
from llmjudge.sessions.service import create_session

__all__ = [
    "Comparison",
    "JudgeSession",
    "SessionIn",
    "SessionOut",
    "create_session",
    "list_sessions",
]
