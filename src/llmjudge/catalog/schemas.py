"""Catalog request and response models."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmjudge.core.text.names import clean_name

# Re-exported: every import's error rows are the row reader's, shown the same way everywhere.
from llmjudge.infra.rowfiles import RowError as RowError


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant", "tool"]
    content: str


Content = str | list[Message]


def pillar_name(v: str) -> str:
    """One spelling per pillar name: runs of any whitespace (tabs, NBSP, U+2028) become one
    space and the ends are trimmed, so " Math" and "Math\u00a0" are the same pillar; emoji
    sequences are kept, other invisible code points refused by name (core.text.names)."""
    return clean_name(v)


class PillarIn(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=5000)

    @field_validator("name")
    @classmethod
    def strip_name(cls, v: str) -> str:
        return pillar_name(v)


class PillarPatch(BaseModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=5000)

    @field_validator("name")
    @classmethod
    def strip_name(cls, v: str | None) -> str | None:
        return None if v is None else pillar_name(v)


class PillarOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    name: str
    description: str
    thread_count: int = 0
    created_at: datetime


class ThreadIn(BaseModel):
    """One imported row (CSV or JSONL)."""

    model_config = ConfigDict(extra="forbid")
    pillar: str = Field(min_length=1, max_length=200)
    external_id: str | None = Field(default=None, max_length=300)
    title: str = Field(default="", max_length=1000)
    prompt_key: str | None = Field(default=None, max_length=300)
    # The text of the prompt the thread answers (threads sharing a prompt key share it).
    prompt: str | None = Field(default=None, max_length=200_000)
    content: Content
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("pillar")
    @classmethod
    def strip_pillar(cls, v: str) -> str:
        return pillar_name(v)

    @field_validator("content")
    @classmethod
    def non_empty(cls, v: Content) -> Content:
        # An empty answer ("") is a result to judge (a model that said nothing); a thread
        # with no content at all (missing, null, no messages) is not.
        if isinstance(v, list) and not v:
            raise ValueError("content must have at least one message")
        return v


class ThreadSummary(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    pillar_id: int
    pillar_name: str
    external_id: str
    title: str
    prompt_key: str | None
    content_hash: str
    created_at: datetime


class ThreadOut(ThreadSummary):
    prompt: str | None = None
    content: str | list[dict[str, Any]]
    metadata: dict[str, Any]


class ThreadPage(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[ThreadSummary]


class ImportResult(BaseModel):
    created: int
    updated: int
    pillars_created: list[str]
    total: int
