"""Judgments made elsewhere (another tool, a published benchmark): parse and validate a JSONL
file without touching the database.

One JSON object per line:

    {"thread_a": REF, "thread_b": REF, "verdict": "A" | "B" | "TIE"}
    {"thread_a": REF, "thread_b": REF, "judgment": "<the judge's raw answer>"}

REF is a thread id (an integer) or ``{"pillar": name, "external_id": id}``. ``thread_a`` is
the thread the judge saw first. Optional: ``reasoning`` (with ``verdict``), ``confidence``
(0..1), ``scores_a`` / ``scores_b`` (criterion -> Likert 1..5; they override scores parsed
from ``judgment``), ``repetition`` (>= 0), ``swap_group``, ``group`` and ``strength``
(``"strong"`` or 2 for A>>B, ``"weak"`` or 1 for A>B; read from a ``judgment``'s tag
such as ``[[A>>B]]`` when not given; never stored for a tie).

``preference`` is the judge's probability that thread_a is better, stored as the
comparison's ``prob_a`` (ratings then count it as a fractional win). The upload declares
its scale: ``probability`` (0..1, the default) or ``alpacaeval`` (1..2, AlpacaEval's
annotations: 1 = output_1 better, 2 = output_2 better; P(A) = 2 - preference). A value
outside the scale is an error naming the line. A line with a preference needs no
``verdict``: the verdict is then the likelier side (a tie at exactly even).

A row may carry the reference label of its pair too, so recorded judgments are scored
without calling any model: ``label`` (A, B or TIE relative to the row's thread_a and
thread_b), ``annotator``, ``source`` (gold unless it says human) and ``note``. Rows of one
pair repeating the same label (an original and its swap) store it once; rows of one pair,
source and annotator that disagree are an error.

A ``judgment`` is read by the same parser as live sessions (`judging.verdicts`), or under
the verdict format given with the file (a published judge's own rules); one it cannot read becomes a failed comparison that keeps the text and the parse error (a
verdict is never guessed).

Position swaps:

- Lines with the same explicit ``swap_group`` (any string or integer) form one swap pair:
  the first in the file is the original, the second must show the same two threads in
  swapped positions; a third is an error.
- Other lines are paired automatically: within the same ``group`` (a free label, e.g. a
  prompt variant; a pair of threads already implies its prompt) and ``repetition``, a line
  showing (b, a) is the swap of the earliest unpaired line showing (a, b); a line with no
  such partner opens a new group (a single comparison, or an original whose twin comes
  later).

All or nothing: the caller stores the rows only when there are no errors.

About 590 lines (50 of them this docstring) as one piece: the judgment row model, its
validation and the mapping of rows to threads are one parser, shared by the native, FastChat
and Arena-Hard paths.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from llmjudge.catalog import RowError
from llmjudge.core.judging.formats import (
    SearchBudget,
    SearchBudgetSpent,
    VerdictFormat,
    parse_with_format,
)
from llmjudge.core.judging.verdicts import VerdictParseError, parse_verdict
from llmjudge.infra.rowfiles import compared_with_itself, jsonl_objects, read_upload

__all__ = [
    "JudgmentIn",
    "KnownThread",
    "ParsedJudgment",
    "ParsedJudgments",
    "PreferenceScale",
    "ResolvedJudgment",
    "RowLabel",
    "ThreadKey",
    "ThreadRefIn",
    "assign_swap_groups",
    "judgment_file_objects",
    "parse_judgment_file",
    "parse_judgment_objects",
    "resolve_judgments",
]

Winner = Literal["A", "B", "TIE"]
PreferenceScale = Literal["probability", "alpacaeval"]
PREFERENCE_SCALES: dict[str, tuple[float, float, str]] = {
    # scale -> (low, high, what it means)
    "probability": (0.0, 1.0, "P(thread_a is better)"),
    "alpacaeval": (1.0, 2.0, "1 = thread_a (output_1) better, 2 = thread_b better"),
}
# A thread id, or (pillar name, external id).
ThreadKey = int | tuple[str, str]
MAX_CRITERIA = 20
# The rule of SessionIn.criteria, so an imported session reads like any other.
_CRITERION = re.compile(r"^[A-Za-z][A-Za-z0-9_\- ]{0,59}$")
_VERDICTS: dict[str, Winner] = {"A": "A", "B": "B", "TIE": "TIE"}
Likert = Annotated[float, Field(ge=1, le=5)]
_THREAD_REF_HELP = 'must be a thread id (an integer) or {"pillar": name, "external_id": id}'


class ThreadRefIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pillar: str = Field(min_length=1, max_length=200)
    external_id: str = Field(min_length=1, max_length=300)

    @field_validator("external_id", mode="before")
    @classmethod
    def id_as_text(cls, v: object) -> object:
        # Benchmarks number their questions: {"external_id": 81} means "81".
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


class JudgmentIn(BaseModel):
    """One line of the file."""

    model_config = ConfigDict(extra="forbid")
    thread_a: StrictInt | ThreadRefIn
    thread_b: StrictInt | ThreadRefIn
    verdict: str | None = None
    judgment: str | None = None
    reasoning: str | None = None
    confidence: float | None = Field(default=None, ge=0, le=1)
    preference: float | None = Field(default=None, allow_inf_nan=False)
    scores_a: dict[str, Likert] = Field(default_factory=dict)
    scores_b: dict[str, Likert] = Field(default_factory=dict)
    repetition: int = Field(default=0, ge=0, le=1_000_000)
    swap_group: StrictInt | str | None = None
    group: StrictInt | str | None = None
    strength: Literal["strong", "weak", 1, 2] | None = None
    # Whose verdict this is: several judges' lines for the same pairs make a panel.
    judge: str | None = Field(default=None, min_length=1, max_length=200)
    label: str | None = None
    annotator: str = Field(default="", max_length=200)
    source: Literal["human", "gold"] = "gold"
    note: str = Field(default="", max_length=10_000)

    @field_validator("source", mode="before")
    @classmethod
    def _source_case(cls, v: object) -> object:
        return v.strip().lower() if isinstance(v, str) else v


@dataclass(frozen=True)
class RowLabel:
    """The reference label a judgment row carries, relative to its thread_a, thread_b."""

    label: Winner
    source: str
    annotator: str
    note: str


_STRENGTHS = {"strong": 2, "weak": 1, 1: 1, 2: 2}


@dataclass(frozen=True)
class ParsedJudgment:
    line: int
    thread_a: ThreadKey
    thread_b: ThreadKey
    winner: Winner | None  # None: the judgment could not be read (see parse_error)
    parse_error: str | None
    raw_response: str | None
    reasoning: str | None
    confidence: float | None
    scores_a: dict[str, float]
    scores_b: dict[str, float]
    repetition: int
    swap_label: str | None  # explicit swap_group, as text
    group: str | None
    strength: int | None = None  # 2 strong, 1 weak; None for a tie or without one
    judge: str | None = None
    reference: RowLabel | None = None
    prob_a: float | None = None  # from ``preference``, on the probability scale


@dataclass
class ParsedJudgments:
    rows: list[ParsedJudgment] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)


def _key(ref: int | ThreadRefIn) -> ThreadKey:
    return ref if isinstance(ref, int) else (ref.pillar, ref.external_id)


def _label(value: int | str | None) -> str | None:
    return None if value is None else str(value)


def preference_probability(value: float, scale: PreferenceScale, line: int) -> float | RowError:
    """P(thread_a is better) from a ``preference`` on its declared scale."""
    low, high, meaning = PREFERENCE_SCALES[scale]
    if not low <= value <= high:
        return RowError(
            line=line,
            field="preference",
            message=f"preference {value:g} is outside the {scale} scale {low:g} to {high:g} "
            f"({meaning})",
        )
    return value if scale == "probability" else min(1.0, max(0.0, 2.0 - value))


def _judged(
    row: JudgmentIn,
    line: int,
    fmt: VerdictFormat | None = None,
    budget: SearchBudget | None = None,
    scale: PreferenceScale = "probability",
) -> ParsedJudgment | RowError:
    """The verdict of a validated line, or the error that rejects the line."""
    prob_a = None
    if row.preference is not None:
        found = preference_probability(row.preference, scale, line)
        if isinstance(found, RowError):
            return found
        prob_a = found
        if row.verdict is None and row.judgment is None:
            row = row.model_copy(
                update={"verdict": "A" if prob_a > 0.5 else "B" if prob_a < 0.5 else "TIE"}
            )
    if (row.verdict is None) == (row.judgment is None):
        return RowError(
            line=line,
            field="verdict",
            message="give exactly one of verdict and judgment (or a preference)",
        )
    winner: Winner | None
    parse_error = raw = None
    reference = None
    if row.label is not None:
        label = _VERDICTS.get(row.label.strip().upper())
        if label is None:
            return RowError(
                line=line, field="label", message=f"unknown label {row.label!r}: use A, B or TIE"
            )
        reference = RowLabel(label, row.source, row.annotator.strip(), row.note)
    reasoning, confidence = row.reasoning, row.confidence
    scores_a, scores_b = dict(row.scores_a), dict(row.scores_b)
    strength = None if row.strength is None else _STRENGTHS[row.strength]
    if row.verdict is not None:
        winner = _VERDICTS.get(row.verdict.strip().upper())
        if winner is None:
            return RowError(
                line=line,
                field="verdict",
                message=f"verdict must be A, B or TIE, not {row.verdict!r}",
            )
    else:
        raw = row.judgment
        try:
            if fmt is None:
                verdict = parse_verdict(raw or "")
            else:
                parsed = parse_with_format(raw or "", fmt, budget=budget)
                verdict = parsed.verdict
                parse_error = parsed.unparsed  # a tie the format counts, with its reason
        except VerdictParseError as e:
            winner, parse_error = None, str(e)
        else:
            winner = verdict.winner
            reasoning = reasoning or verdict.reasoning or None
            confidence = confidence if confidence is not None else verdict.confidence
            scores_a = verdict.scores_a | scores_a
            scores_b = verdict.scores_b | scores_b
            if strength is None and verdict.strength is not None:
                strength = _STRENGTHS[verdict.strength]
    return ParsedJudgment(
        line=line,
        thread_a=_key(row.thread_a),
        thread_b=_key(row.thread_b),
        winner=winner,
        parse_error=parse_error,
        raw_response=raw,
        reasoning=reasoning,
        confidence=confidence,
        scores_a=scores_a,
        scores_b=scores_b,
        repetition=row.repetition,
        swap_label=_label(row.swap_group),
        group=_label(row.group),
        strength=None if winner in (None, "TIE") else strength,
        judge=row.judge,
        reference=reference,
        prob_a=prob_a,
    )


def _validation_errors(e: ValidationError, raw: dict[str, object], line: int) -> list[RowError]:
    """One error per field; a thread reference gets one message, not one per union member."""
    out: dict[str, str] = {}
    for err in e.errors():
        loc = [str(p) for p in err["loc"]]
        if loc and loc[0] in ("thread_a", "thread_b"):
            if isinstance(raw.get(loc[0]), dict) and len(loc) > 2:
                out.setdefault(f"{loc[0]}.{loc[2]}", err["msg"])
            elif not isinstance(raw.get(loc[0]), dict):
                out.setdefault(loc[0], _THREAD_REF_HELP)
            continue
        out.setdefault(".".join(loc) or "row", err["msg"])
    return [RowError(line=line, field=f, message=m) for f, m in out.items()]


def judgment_file_objects(
    data: bytes, errors: list[RowError], *, max_rows: int, max_chars: int
) -> list[tuple[int, dict[str, Any]]]:
    """(line, object) of each line of a JSONL upload; what cannot be read becomes errors."""
    upload = read_upload(None, data, errors, ("jsonl",))
    if upload is None:
        return []
    return list(jsonl_objects(upload[1], errors, max_rows=max_rows, max_chars=max_chars))


def parse_judgment_file(
    data: bytes,
    *,
    max_rows: int,
    max_chars: int,
    verdict_format: VerdictFormat | None = None,
    preference_scale: PreferenceScale = "probability",
) -> ParsedJudgments:
    """Validate every line and read every verdict; thread references stay unresolved."""
    errors: list[RowError] = []
    objects = judgment_file_objects(data, errors, max_rows=max_rows, max_chars=max_chars)
    return parse_judgment_objects(
        objects, errors, verdict_format=verdict_format, preference_scale=preference_scale
    )


def parse_judgment_objects(
    objects: Iterable[tuple[int, Mapping[str, Any]]],
    errors: Sequence[RowError] = (),
    *,
    verdict_format: VerdictFormat | None = None,
    preference_scale: PreferenceScale = "probability",
) -> ParsedJudgments:
    """Validate native rows given as (line, object) (a file's, or a converter's output).
    ``verdict_format`` reads raw ``judgment`` texts the way their judge is read (default:
    the built-in parser), all lines sharing one search budget: a pattern too slow for the
    upload is one error at the line where the budget ran out, and no line after it is read
    (the import fails as a whole)."""
    out = ParsedJudgments(errors=list(errors))
    budget = SearchBudget()
    for line_no, raw in objects:
        try:
            row = JudgmentIn.model_validate(raw)
        except ValidationError as e:
            out.errors.extend(_validation_errors(e, raw, line_no))
            continue
        budget.add_row(len(row.judgment or ""))
        try:
            judged = _judged(row, line_no, verdict_format, budget, preference_scale)
        except SearchBudgetSpent as e:
            out.errors.append(RowError(line=line_no, field="judgment", message=str(e)))
            return out
        if isinstance(judged, RowError):
            out.errors.append(judged)
        else:
            out.rows.append(judged)
    if not out.rows and not out.errors:
        out.errors.append(RowError(line=1, field="file", message="the file has no judgments"))
    out.errors.extend(_criteria_errors(out.rows))
    return out


def _criteria_errors(rows: Sequence[ParsedJudgment]) -> list[RowError]:
    """Criterion names must be valid session criteria, spelt one way, at most 20."""
    errors: list[RowError] = []
    spelling: dict[str, str] = {}  # lower case -> first spelling
    for row in rows:
        for name in dict.fromkeys((*row.scores_a, *row.scores_b)):
            if not _CRITERION.match(name):
                errors.append(
                    RowError(
                        line=row.line,
                        field="scores",
                        message=f"criterion {name!r} must start with a letter and use letters, "
                        "digits, _, - or spaces (at most 60 characters)",
                    )
                )
            elif spelling.setdefault(name.lower(), name) != name:
                errors.append(
                    RowError(
                        line=row.line,
                        field="scores",
                        message=f"criterion {name!r} is spelt {spelling[name.lower()]!r} "
                        "elsewhere; use one spelling",
                    )
                )
    if len(spelling) > MAX_CRITERIA:
        errors.append(
            RowError(
                line=1,
                field="scores",
                message=f"{len(spelling)} criteria; at most {MAX_CRITERIA} are allowed",
            )
        )
    return errors


# --------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class KnownThread:
    id: int
    pillar_id: int


@dataclass(frozen=True)
class ResolvedJudgment:
    judgment: ParsedJudgment
    thread_a: KnownThread
    thread_b: KnownThread
    swap_group: int
    is_swap: bool


def _describe(key: ThreadKey) -> str:
    if isinstance(key, int):
        return f"no thread with id {key}"
    return f"no thread with external_id {key[1]!r} in pillar {key[0]!r}"


def assign_swap_groups(
    pairs: Sequence[tuple[int, int]],
    labels: Sequence[str | None],
    groups: Sequence[str | None],
    repetitions: Sequence[int],
    lines: Sequence[int],
) -> tuple[list[int], list[bool], list[RowError]]:
    """Swap group (0, 1, ... in order of first appearance) and is_swap of each comparison
    (thread_a, thread_b), by the rules in the module docstring; O(n)."""
    group_of: list[int] = []
    is_swap: list[bool] = []
    errors: list[RowError] = []
    explicit: dict[str, tuple[int, int, int, int]] = {}  # label -> group, a, b, line
    explicit_full: dict[str, int] = {}  # label -> line of its swap
    # (group, repetition, lo, hi) -> orientation (a, b) -> groups waiting for their swap
    waiting: dict[tuple[str | None, int, int, int], dict[tuple[int, int], deque[int]]] = {}
    next_group = 0
    for (a, b), label, grp, rep, line in zip(
        pairs, labels, groups, repetitions, lines, strict=True
    ):
        if label is not None:
            if label in explicit_full:
                first_line = explicit[label][3]
                errors.append(
                    RowError(
                        line=line,
                        field="swap_group",
                        message=f"swap_group {label!r} already holds an original and its swap "
                        f"(lines {first_line} and {explicit_full[label]})",
                    )
                )
                group_of.append(-1)
                is_swap.append(False)
                continue
            if label in explicit:
                g, first_a, first_b, first_line = explicit[label]
                if (a, b) != (first_b, first_a):
                    errors.append(
                        RowError(
                            line=line,
                            field="swap_group",
                            message=f"swap_group {label!r} started on line {first_line} with "
                            f"threads ({first_a}, {first_b}); its swap must show "
                            f"({first_b}, {first_a})",
                        )
                    )
                explicit_full[label] = line
                group_of.append(g)
                is_swap.append(True)
                continue
            explicit[label] = (next_group, a, b, line)
            group_of.append(next_group)
            is_swap.append(False)
            next_group += 1
            continue
        slots = waiting.setdefault((grp, rep, min(a, b), max(a, b)), {})
        partners = slots.get((b, a))
        if partners:
            group_of.append(partners.popleft())
            is_swap.append(True)
        else:
            slots.setdefault((a, b), deque()).append(next_group)
            group_of.append(next_group)
            is_swap.append(False)
            next_group += 1
    return group_of, is_swap, errors


def resolve_judgments(
    rows: Sequence[ParsedJudgment], threads: Mapping[ThreadKey, KnownThread]
) -> tuple[list[ResolvedJudgment], list[RowError]]:
    """Threads of each row (unknown ones and self-pairs are errors) and swap groups."""
    errors: list[RowError] = []
    known: list[tuple[ParsedJudgment, KnownThread, KnownThread]] = []
    for row in rows:
        found = []
        for side, key in (("thread_a", row.thread_a), ("thread_b", row.thread_b)):
            thread = threads.get(key)
            if thread is None:
                errors.append(RowError(line=row.line, field=side, message=_describe(key)))
            found.append(thread)
        a, b = found
        if a is None or b is None:
            continue
        if a.id == b.id:
            errors.append(compared_with_itself(row.line, a.id))
            continue
        known.append((row, a, b))
    groups, swapped, pairing_errors = assign_swap_groups(
        [(a.id, b.id) for _, a, b in known],
        [r.swap_label for r, _, _ in known],
        [r.group for r, _, _ in known],
        [r.repetition for r, _, _ in known],
        [r.line for r, _, _ in known],
    )
    errors.extend(pairing_errors)
    errors.sort(key=lambda e: e.line)
    resolved = [
        ResolvedJudgment(judgment=r, thread_a=a, thread_b=b, swap_group=g, is_swap=s)
        for (r, a, b), g, s in zip(known, groups, swapped, strict=True)
    ]
    return resolved, errors


@dataclass(frozen=True)
class PanelImport:
    """Several judges' lines as one panel: the comparisons (each judge's lines matched by
    threads, repetition, group and swap label, the k-th such line of one judge to the k-th
    of another) and each member's judgment of each (None: that judge has no line for it)."""

    judges: list[str]
    comparisons: list[ResolvedJudgment]  # the first line seen of each, swap groups redone
    votes: list[list[ParsedJudgment | None]]  # [comparison][member]


def panel_judges(rows: Sequence[ParsedJudgment]) -> tuple[list[str], list[RowError]]:
    """The judges named in a file, in order of appearance; a file names a judge on every
    line or on none (a line without one would belong to nobody)."""
    judges = list(dict.fromkeys(r.judge for r in rows if r.judge is not None))
    if not judges:
        return [], []
    errors = [
        RowError(line=r.line, field="judge", message="name the judge on every line or on none")
        for r in rows
        if r.judge is None
    ]
    return judges, errors


def group_panel(
    judges: Sequence[str], resolved: Mapping[str, Sequence[ResolvedJudgment]]
) -> tuple[PanelImport, list[RowError]]:
    """Match the judges' resolved lines into comparisons (O(n))."""
    index: dict[tuple[object, ...], int] = {}
    firsts: list[ResolvedJudgment] = []
    votes: list[list[ParsedJudgment | None]] = []
    errors: list[RowError] = []
    for m, judge in enumerate(judges):
        seen: dict[tuple[object, ...], int] = {}
        for r in resolved[judge]:
            j = r.judgment
            base = (r.thread_a.id, r.thread_b.id, j.repetition, j.group, j.swap_label)
            k = seen.get(base, 0)
            seen[base] = k + 1
            key = (*base, k)
            i = index.get(key)
            if i is None:
                i = index[key] = len(firsts)
                firsts.append(r)
                votes.append([None] * len(judges))
            votes[i][m] = j
    groups, swapped, pairing_errors = assign_swap_groups(
        [(r.thread_a.id, r.thread_b.id) for r in firsts],
        [r.judgment.swap_label for r in firsts],
        [r.judgment.group for r in firsts],
        [r.judgment.repetition for r in firsts],
        [r.judgment.line for r in firsts],
    )
    errors.extend(pairing_errors)
    comparisons = [
        ResolvedJudgment(
            judgment=r.judgment, thread_a=r.thread_a, thread_b=r.thread_b, swap_group=g, is_swap=s
        )
        for r, g, s in zip(firsts, groups, swapped, strict=True)
    ]
    return PanelImport(list(judges), comparisons, votes), errors
