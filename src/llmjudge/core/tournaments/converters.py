"""Judgment files other tools write, as rows of llmjudge's own import format (pure).

`sessions.importing` documents the native row: ``thread_a``, ``thread_b`` (here always a
``{"pillar": model, "external_id": ...}`` reference), ``verdict`` (A, B, TIE) or the raw
``judgment`` text, ``reasoning``, ``swap_group``, ``group``. Converted rows also carry
``strength`` (1 = better, 2 = much better) where the source says how strongly.

Models are pillars and each question's answer is a thread; ``external_id`` is a template
with ``{question_id}`` and ``{model}`` (the demo's MT-Bench threads are
``mtbench-{question_id}-{model}``).

- FastChat llm_judge ``model_judgment/*_pair.jsonl``: one line per question, pair of models
  and turn; game 1 shows ``model_1`` as Assistant A, game 2 shows ``model_2`` as A. Winners
  are ``model_1``, ``model_2``, ``tie`` (or ``error``: the raw judgment is kept and read by
  the verdict parser, which records it as a failed comparison when it cannot read it).
- Arena-Hard-Auto ``model_judgment/<judge>/<model>.jsonl``: one line per question and
  model, ``games`` judged against a baseline: game 1 shows the baseline as A, game 2 the
  model as A. ``score`` is ``A>>B``, ``A>B``, ``A=B``, ``B>A``, ``B>>A`` (``>>`` is strength
  2), or null when the judge's answer had no verdict.

Both games of a line form one explicit swap pair. Every problem names its line.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ARENA_HARD_BASELINE",
    "FORMATS",
    "Converted",
    "Problem",
    "arena_hard_score",
    "check_external_id",
    "convert",
    "convert_arena_hard",
    "convert_fastchat",
]

Format = Literal["native", "fastchat", "arena_hard"]
FORMATS: tuple[Format, ...] = ("native", "fastchat", "arena_hard")
ARENA_HARD_BASELINE = "gpt-4-0314"
DEFAULT_EXTERNAL_ID = "{question_id}"
_PLACEHOLDERS = frozenset({"question_id", "model"})
_SCORE = re.compile(r"^\s*([AB])\s*(>>|>|=|<<|<)\s*([AB])\s*$")


@dataclass(frozen=True)
class Problem:
    line: int
    field: str
    message: str


@dataclass
class Converted:
    rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    judges: list[str] = field(default_factory=list)  # distinct, in order of appearance


def check_external_id(template: str) -> str | None:
    """Why an external_id template is unusable, or None."""
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        return f"external_id template: {e}"
    unknown = names - _PLACEHOLDERS
    if unknown:
        return f"external_id template: unknown placeholder(s) {sorted(unknown)}; use {{question_id}} and {{model}}"
    if "question_id" not in names:
        return "external_id template must contain {question_id}"
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | str):
        text = str(value).strip()
        return text or None
    return None


def _ref(model: str, question_id: str, template: str) -> dict[str, str]:
    return {"pillar": model, "external_id": template.format(question_id=question_id, model=model)}


def _judge_name(value: Any) -> str | None:
    # FastChat writes [model, prompt name]; Arena-Hard a plain model name.
    if isinstance(value, list | tuple) and value:
        return " / ".join(str(v) for v in value)
    return _text(value)


def _require(
    record: Mapping[str, Any], line: int, names: Iterable[str], problems: list[Problem]
) -> dict[str, str] | None:
    found: dict[str, str] = {}
    for name in names:
        value = _text(record.get(name))
        if value is None:
            problems.append(Problem(line, name, "missing, or not a string or an integer"))
        else:
            found[name] = value
    return found if len(found) == len(tuple(names)) else None


_FASTCHAT_WINNER = {"model_1": 1, "model_2": 2, "tie": 0}


def convert_fastchat(
    records: Iterable[tuple[int, Mapping[str, Any]]], *, external_id: str = DEFAULT_EXTERNAL_ID
) -> Converted:
    """FastChat llm_judge pairwise judgments (``g1_winner``/``g2_winner``) as native rows."""
    out = Converted()
    for line, record in records:
        names = ("question_id", "model_1", "model_2")
        found = _require(record, line, names, out.problems)
        if found is None:
            continue
        qid, m1, m2 = found["question_id"], found["model_1"], found["model_2"]
        if m1 == m2:
            out.problems.append(Problem(line, "model_2", "model_1 and model_2 are the same"))
            continue
        judge = _judge_name(record.get("judge"))
        if judge and judge not in out.judges:
            out.judges.append(judge)
        turn = _text(record.get("turn")) or "1"
        label = f"fastchat:{qid}:{m1}:{m2}:turn{turn}"
        # Game 1: model_1 is A; game 2: model_2 is A.
        games = (("g1", m1, m2, {1: "A", 2: "B"}), ("g2", m2, m1, {1: "B", 2: "A"}))
        rows: list[dict[str, Any]] = []
        for game, first, second, side in games:
            raw_winner = record.get(f"{game}_winner")
            judgment = record.get(f"{game}_judgment")
            row: dict[str, Any] = {
                "thread_a": _ref(first, qid, external_id),
                "thread_b": _ref(second, qid, external_id),
                "swap_group": label,
                "group": f"turn {turn}",
            }
            winner = _FASTCHAT_WINNER.get(str(raw_winner).strip().lower())
            if winner is not None:
                row["verdict"] = "TIE" if winner == 0 else side[winner]
                if isinstance(judgment, str) and judgment.strip():
                    row["reasoning"] = judgment
            elif isinstance(judgment, str):
                row["judgment"] = judgment  # "error": the parser decides, or records why not
            else:
                out.problems.append(
                    Problem(line, f"{game}_winner", f"winner {raw_winner!r} and no judgment text")
                )
                rows = []
                break
            rows.append(row)
        out.rows.extend((line, r) for r in rows)
    return out


def arena_hard_score(score: str) -> tuple[Literal["A", "B", "TIE"], int | None] | None:
    """``A>>B`` -> ("A", 2), ``B>A`` -> ("B", 1), ``A=B`` -> ("TIE", None); also ``A<B``."""
    m = _SCORE.match(score)
    if m is None:
        return None
    left, op, right = m.groups()
    if left == right:
        return None
    if op == "=":
        return "TIE", None
    strength = 2 if len(op) == 2 else 1
    better = left if op.startswith(">") else right
    return ("A" if better == "A" else "B"), strength


def convert_arena_hard(
    records: Iterable[tuple[int, Mapping[str, Any]]],
    *,
    baseline: str = ARENA_HARD_BASELINE,
    external_id: str = DEFAULT_EXTERNAL_ID,
) -> Converted:
    """Arena-Hard-Auto judgments against ``baseline`` as native rows, keeping ``>>``."""
    out = Converted()
    for line, record in records:
        qid = _text(record.get("question_id")) or _text(record.get("uid"))
        model = _text(record.get("model"))
        if qid is None:
            out.problems.append(Problem(line, "question_id", "missing"))
        if model is None:
            out.problems.append(Problem(line, "model", "missing"))
        if qid is None or model is None:
            continue
        if model == baseline:
            out.problems.append(
                Problem(
                    line, "model", f"{model!r} is the baseline; it cannot be judged against itself"
                )
            )
            continue
        games = record.get("games")
        if not isinstance(games, list) or not games or len(games) > 2:
            out.problems.append(Problem(line, "games", "must be a list of one or two games"))
            continue
        judge = _judge_name(record.get("judge"))
        if judge and judge not in out.judges:
            out.judges.append(judge)
        label = f"arena_hard:{qid}:{model}"
        rows: list[dict[str, Any]] = []
        for number, game in enumerate(games, start=1):
            where = f"games.{number - 1}"
            if not isinstance(game, Mapping):
                out.problems.append(Problem(line, where, "each game must be an object"))
                rows = []
                break
            # Game 1: the baseline is A; game 2: the model is A.
            first, second = (baseline, model) if number == 1 else (model, baseline)
            row: dict[str, Any] = {
                "thread_a": _ref(first, qid, external_id),
                "thread_b": _ref(second, qid, external_id),
            }
            if len(games) == 2:
                row["swap_group"] = label
            score, judgment = game.get("score"), game.get("judgment")
            parsed = arena_hard_score(score) if isinstance(score, str) else None
            if parsed is not None:
                row["verdict"], strength = parsed
                if strength is not None:
                    row["strength"] = strength
                if isinstance(judgment, str) and judgment.strip():
                    row["reasoning"] = judgment
            elif score is not None:
                out.problems.append(
                    Problem(line, f"{where}.score", f"score {score!r} is not like A>>B, A>B, A=B")
                )
                rows = []
                break
            elif isinstance(judgment, str):
                row["judgment"] = judgment  # no score: the judge gave no verdict
            else:
                out.problems.append(Problem(line, where, "no score and no judgment"))
                rows = []
                break
            rows.append(row)
        out.rows.extend((line, r) for r in rows)
    return out


def convert(
    fmt: Format,
    records: Iterable[tuple[int, Mapping[str, Any]]],
    *,
    external_id: str = DEFAULT_EXTERNAL_ID,
    baseline: str = ARENA_HARD_BASELINE,
) -> Converted:
    """Rows of ``fmt`` as native rows (``native`` passes them through)."""
    if fmt == "native":
        return Converted(rows=[(line, dict(r)) for line, r in records])
    problem = check_external_id(external_id)
    if problem is not None:
        return Converted(problems=[Problem(1, "external_id", problem)])
    if fmt == "fastchat":
        return convert_fastchat(records, external_id=external_id)
    if fmt == "arena_hard":
        return convert_arena_hard(records, baseline=baseline, external_id=external_id)
    raise ValueError(f"unknown format {fmt!r}")
