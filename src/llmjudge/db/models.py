"""Every domain's tables, imported in one place for Alembic and metadata-wide operations."""

from llmjudge.catalog.models import Pillar, Thread
from llmjudge.db.base import Base

__all__ = ["Base", "Pillar", "Thread"]
