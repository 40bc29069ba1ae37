"""Pillars (a data source, a model, a prompt version) and their threads."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, Index, String, Text, UniqueConstraint
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column, relationship

from llmjudge.infra.db.base import Base, child_rows, created_at_column, owned_by, updated_at_column


class Pillar(Base):
    __tablename__ = "pillars"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_at: Mapped[datetime] = created_at_column()

    threads: Mapped[list[Thread]] = child_rows("pillar")


class Thread(Base):
    __tablename__ = "threads"
    __table_args__ = (
        UniqueConstraint("pillar_id", "external_id"),
        Index("ix_threads_prompt_key", "prompt_key"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    pillar_id: Mapped[int] = owned_by("pillars", index=True)
    external_id: Mapped[str] = mapped_column(String(300))
    title: Mapped[str] = mapped_column(Text, default="", server_default="")
    prompt_key: Mapped[str | None] = mapped_column(String(300))
    # The text of the prompt this thread answers (threads sharing a prompt key share it), so a
    # published judge template's {prompt} / {answer_a} / {answer_b} can be filled.
    prompt: Mapped[str | None] = mapped_column(Text)
    # Plain text, or a list of {"role", "content"} messages.
    content: Mapped[Any] = mapped_column(JSONB)
    content_hash: Mapped[str] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSONB, default=dict, server_default="{}"
    )
    # analysis.style.STYLE_FEATURES of the answer (length, markdown densities), computed at
    # import so style control never re-reads the texts; NULL only for a row never imported.
    style_features: Mapped[list[float] | None] = mapped_column(ARRAY(Float))
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = updated_at_column()

    pillar: Mapped[Pillar] = relationship(back_populates="threads")
