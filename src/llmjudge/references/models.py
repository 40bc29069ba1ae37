"""Reference labels: which of two threads is better, by a person or a gold answer key.

A label belongs to the thread pair, not to a session, so every session that compares the pair
can be scored against it. Pairs are stored in canonical order (``thread_a_id < thread_b_id``)
with the label flipped to match, so one annotator has one label per pair whichever way it was
written; readers map it to the order of the comparison they score.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Index,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from llmjudge.infra.db.base import Base, created_at_column, owned_by, refers_to

LABELS = ("A", "B", "TIE")
SOURCES = ("human", "gold")


class ReferenceLabel(Base):
    __tablename__ = "reference_labels"
    __table_args__ = (
        CheckConstraint("thread_a_id < thread_b_id", name="canonical"),
        CheckConstraint(f"label IN {LABELS!r}", name="label"),
        CheckConstraint(f"source IN {SOURCES!r}", name="source"),
        UniqueConstraint("thread_a_id", "thread_b_id", "source", "annotator"),
        Index("ix_reference_labels_thread_b_id", "thread_b_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    thread_a_id: Mapped[int] = owned_by("threads")
    thread_b_id: Mapped[int] = owned_by("threads")
    label: Mapped[str] = mapped_column(String(3))
    # Key 4 in the review queue: neither answer is acceptable (stored as a TIE).
    both_bad: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")
    source: Mapped[str] = mapped_column(String(10))
    annotator: Mapped[str] = mapped_column(String(200), default="", server_default="")
    note: Mapped[str] = mapped_column(Text, default="", server_default="")
    # The session whose review queue produced it (None for imports).
    session_id: Mapped[int | None] = refers_to("judge_sessions")
    created_at: Mapped[datetime] = created_at_column()
