"""Every domain's tables, imported in one place for Alembic and metadata-wide operations.

A composition root, like ``app`` and ``cli``: it knows every domain's tables, so it lives
outside ``db/`` (infrastructure imports no domain).
"""

from llmjudge.analysis.stored import StoredFigure
from llmjudge.auth.models import ApiToken, LoginLink, User, UserSession
from llmjudge.catalog.models import Pillar, Thread
from llmjudge.infra.db.base import Base
from llmjudge.personas.models import (
    JudgePromptVersion,
    Persona,
    PersonaDecision,
    PersonaIteration,
    PersonaPair,
    PersonaPairLabel,
    TaskOutput,
)
from llmjudge.providers.models import LLMCacheEntry, LLMCall, LLMModel, LLMProcess, Provider
from llmjudge.references.models import ReferenceLabel
from llmjudge.sessions.models import AdaptiveRound, Comparison, ComparisonVote, JudgeSession

__all__ = [
    "User",
    "ApiToken",
    "UserSession",
    "LoginLink",
    "Base",
    "Pillar",
    "Thread",
    "Provider",
    "LLMModel",
    "LLMCall",
    "LLMCacheEntry",
    "LLMProcess",
    "JudgeSession",
    "Comparison",
    "ComparisonVote",
    "AdaptiveRound",
    "StoredFigure",
    "Persona",
    "JudgePromptVersion",
    "PersonaPair",
    "PersonaPairLabel",
    "TaskOutput",
    "PersonaIteration",
    "PersonaDecision",
    "ReferenceLabel",
]
