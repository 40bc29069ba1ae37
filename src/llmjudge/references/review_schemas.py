"""Request and response models of the human pairwise review queue."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

ID_MAX = 2**31 - 1
MAX_LABELS_PER_PAIR = 20
NOTE_MAX = 5000

ThreadId = Field(ge=1, le=ID_MAX)


class ReviewSettings(BaseModel):
    """How a session's review queue is built; stored in the session's options."""

    model_config = ConfigDict(extra="forbid")

    labels_per_pair: int = Field(
        1,
        ge=1,
        le=MAX_LABELS_PER_PAIR,
        description="human labels a pair needs to be finished (N reviewers per pair)",
    )
    sample_size: int | None = Field(
        None, ge=1, le=1_000_000, description="review only a seeded random sample of K pairs"
    )
    inconsistent_only: StrictBool = Field(
        False,
        description="review only pairs whose judge verdicts disagree (its two orders of a "
        "swap pair, or its repetitions)",
    )
    seed: int | None = Field(
        None,
        ge=0,
        le=2**63 - 1,
        description="seed of the queue order and sample (none: the session's own seed)",
    )


class ReviewProgress(BaseModel):
    finished: int = Field(description="pairs of the queue with enough human labels")
    total: int = Field(description="pairs in the queue")
    mine: int = Field(description="pairs of the queue the caller has labelled")
    claimed_by_others: int = Field(description="pairs other reviewers are looking at now")
    labels_per_pair: int


class ReviewSettingsOut(ReviewSettings):
    seed: int | None = Field(description="the seed in use")
    session_id: int
    pairs_in_session: int
    progress: ReviewProgress


class ShownThread(BaseModel):
    """One side as the reviewer sees it: no pillar, no judge verdict (the review is blind)."""

    thread_id: int
    content: str | list[dict[str, Any]]
    empty: bool = Field(description="the thread's answer is empty")


class ReviewPair(BaseModel):
    session_id: int
    thread_a_id: int = Field(description="the pair in canonical (stored) order: the smaller id")
    thread_b_id: int
    shown_a: ShownThread = Field(description="left, key 1")
    shown_b: ShownThread = Field(description="right, key 2")
    prompt: str | None = Field(
        description="the prompt both threads answer when they share a prompt key (its text "
        "when imported, else the key)"
    )
    prompt_is_key: bool = False
    my_label: Literal["A", "B", "TIE"] | None = Field(
        None, description="the caller's own earlier label, for the sides as shown"
    )
    my_both_bad: bool = False
    my_note: str = ""


class ReviewNext(BaseModel):
    pair: ReviewPair | None = Field(description="None when nothing is left for the caller")
    progress: ReviewProgress


class ReviewLabelIn(BaseModel):
    """A label for the sides as shown: ``shown_a`` is the left thread (key 1)."""

    model_config = ConfigDict(extra="forbid")

    shown_a: int = ThreadId
    shown_b: int = ThreadId
    label: Literal["A", "B", "TIE"]
    both_bad: StrictBool = Field(
        False, description="key 4: neither is acceptable (label must be TIE)"
    )
    note: str = Field("", max_length=NOTE_MAX)

    @model_validator(mode="after")
    def _check(self) -> ReviewLabelIn:
        if self.shown_a == self.shown_b:
            raise ValueError("a pair needs two different threads")
        if self.both_bad and self.label != "TIE":
            raise ValueError("both_bad is stored as a TIE: send label TIE with it")
        return self


class ReviewSkipIn(BaseModel):
    """The pair being skipped (any order); without one, the caller's current pair."""

    model_config = ConfigDict(extra="forbid")

    thread_a_id: int | None = Field(None, ge=1, le=ID_MAX)
    thread_b_id: int | None = Field(None, ge=1, le=ID_MAX)


class StoredReviewLabel(BaseModel):
    id: int
    thread_a_id: int
    thread_b_id: int
    label: Literal["A", "B", "TIE"] = Field(description="for the pair in canonical order")
    both_bad: bool
    annotator: str
    note: str
    session_id: int | None
    created_at: datetime


class ReviewLabelOut(BaseModel):
    stored: StoredReviewLabel
    progress: ReviewProgress


class MyReviewLabel(BaseModel):
    thread_a_id: int
    thread_b_id: int
    shown_a: int
    shown_b: int
    label: Literal["A", "B", "TIE"] = Field(description="canonical")
    shown_label: Literal["A", "B", "TIE"] = Field(description="for the sides as shown")
    both_bad: bool
    note: str
    created_at: datetime
