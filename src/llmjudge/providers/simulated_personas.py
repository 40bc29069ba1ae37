"""The simulated provider's persona training tasks (see ``providers.simulator``):

``task_answer``
    With probability ``context["accuracy"]`` (default setting ``task_accuracy``) the answer is
    the correct output, lightly reworded in ways ``normalise`` undoes; otherwise a
    deterministic corruption of it (a changed number, a flipped yes/no, a dropped word...).
``judge_label``
    Truth is ``normalise(answer) == normalise(correct_output)``. Each (answer, correct
    output) pair carries one failure tag, a pure function of the two texts
    (``failure_tag``): ``exact`` (the same text), ``formatting`` (equal once case, spacing,
    outer quotes and end punctuation are dropped), ``number`` (a number differs),
    ``flipped`` (yes/no, true/false, correct/incorrect swapped), ``omission`` (the answer
    is the correct output with words left out) or ``other``. The judge returns the truth
    with probability ``min(judge_max_accuracy, judge_base_accuracy + judge_gain_per_rule
    * R_t)`` where ``R_t`` counts the judge prompt's ``- Rule:`` lines that name the pair's
    tag ``t`` with the marker ``[tag: t]`` (a line names at most one tag: its first
    marker). Its ``confidence`` is that probability, jittered by +-0.05. Any other line,
    rule or not, changes nothing, so a prompt gets better only on
    the pairs whose kind of difference it addresses, and no amount of irrelevant rules
    helps. The reasoning names the tag and ``R_t``, so the mechanism can be inspected.
``prompt_engineer``
    Sees only the failures it is given (input, answer, correct output, labels, notes),
    computes their tags from that text, and adds one ``- Rule:`` line naming the most
    common tag among them (ties in ``FAILURE_TAGS`` order), with an example from a failure
    of that tag not already quoted; ``addressed`` lists the numbers of the cases of that
    tag. With no failures it adds a generic rule that names no
    tag, and so helps nothing. Simulated convergence therefore shows that the loop feeds
    failures back to the engineer, not that a real optimiser works.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llmjudge.providers.simulator_params import SimulatorParams, seeded_rng

RULE_PREFIX = "- Rule:"
_FLIPS = {
    "yes": "no",
    "no": "yes",
    "true": "false",
    "false": "true",
    "correct": "incorrect",
    "incorrect": "correct",
}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def normalise(text: str) -> str:
    """Comparison form of an answer: case, spacing, outer quotes and end punctuation dropped."""
    text = " ".join(str(text).casefold().split())
    return text.strip("\"'`").rstrip(".!?;:,").strip()


def count_rules(judge_prompt: str) -> int:
    return sum(1 for line in judge_prompt.splitlines() if line.lstrip().startswith(RULE_PREFIX))


def paraphrase(correct: str, rng: np.random.Generator) -> str:
    """A rewording that ``normalise`` maps back to ``correct``."""
    variants = [correct, f"{correct}.", correct[:1].upper() + correct[1:], f" {correct}\n"]
    choice = variants[int(rng.integers(len(variants)))]
    # Some characters do not survive upper-casing or trailing punctuation: keep it decidable.
    return choice if normalise(choice) == normalise(correct) else correct


def corrupt(correct: str, rng: np.random.Generator) -> str:
    """A plausible wrong answer: never equal to ``correct`` after ``normalise``."""
    number = _NUMBER.search(correct)
    words = correct.split()
    if number:
        value = float(number.group()) + int(rng.integers(1, 10))
        decimals = len(number.group().partition(".")[2])
        new = f"{value:.{decimals}f}"
        wrong = correct[: number.start()] + new + correct[number.end() :]
    elif normalise(correct) in _FLIPS:
        wrong = _FLIPS[normalise(correct)]
    elif len(words) >= 2:
        drop = int(rng.integers(len(words)))
        wrong = " ".join(words[:drop] + words[drop + 1 :])
    else:
        wrong = correct[::-1]
    if normalise(wrong) == normalise(correct):
        wrong = f"not {correct}".strip()
    return wrong


def simulate_task_answer(params: SimulatorParams, ctx: Mapping[str, Any], prompt_key: str) -> str:
    correct = str(ctx.get("correct_output", ""))
    accuracy = float(ctx.get("accuracy", params.task_accuracy))
    rng = seeded_rng(params.seed, "task_answer", str(ctx.get("input", "")), prompt_key)
    return paraphrase(correct, rng) if rng.random() < accuracy else corrupt(correct, rng)


FAILURE_TAGS = ("exact", "formatting", "number", "flipped", "omission", "other")
_TAG_MARKER = re.compile(r"\[tag:\s*([a-z]+)\s*\]", re.IGNORECASE)
_TAG_GUIDANCE = {
    "exact": "An answer identical to the expected output is correct.",
    "formatting": (
        "Differences of case, spacing, quotes or end punctuation alone do not make an answer wrong."
    ),
    "number": "An answer whose number differs from the expected output's is incorrect.",
    "flipped": "An answer that says yes where the expected output says no (or the reverse) is incorrect.",
    "omission": "An answer that leaves out words of the expected output is incorrect.",
    "other": "An answer that states something other than the expected output is incorrect.",
}


def failure_tag(answer: str, correct_output: str) -> str:
    """The kind of difference between an answer and the correct output (see the docstring)."""
    answer, correct = str(answer), str(correct_output)
    if answer == correct:
        return "exact"
    a, c = normalise(answer), normalise(correct)
    if a == c:
        return "formatting"
    if _NUMBER.findall(a) != _NUMBER.findall(c):
        return "number"
    if _FLIPS.get(c) == a:
        return "flipped"
    a_words, c_words = a.split(), c.split()
    if 0 < len(a_words) < len(c_words) and _is_subsequence(a_words, c_words):
        return "omission"
    return "other"


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(word in it for word in short)


def rules_naming(judge_prompt: str) -> dict[str, int]:
    """How many ``- Rule:`` lines name each failure tag (a line names at most one)."""
    counts = dict.fromkeys(FAILURE_TAGS, 0)
    for line in judge_prompt.splitlines():
        if not line.lstrip().startswith(RULE_PREFIX):
            continue
        marker = _TAG_MARKER.search(line)
        if marker and marker.group(1).lower() in counts:
            counts[marker.group(1).lower()] += 1
    return counts


def judge_accuracy(params: SimulatorParams, judge_prompt: str, tag: str) -> float:
    """The simulated judge's chance of being right on a pair with this failure tag."""
    gain = params.judge_gain_per_rule * rules_naming(judge_prompt).get(tag, 0)
    return min(params.judge_max_accuracy, params.judge_base_accuracy + gain)


def simulate_judge_label(params: SimulatorParams, ctx: Mapping[str, Any]) -> dict[str, Any]:
    answer, correct = str(ctx.get("answer", "")), str(ctx.get("correct_output", ""))
    judge_prompt = str(ctx.get("judge_prompt", ""))
    truth = normalise(answer) == normalise(correct)
    tag = failure_tag(answer, correct)
    rng = seeded_rng(
        params.seed,
        "judge_label",
        str(ctx.get("input", "")),
        answer,
        judge_prompt,
        ctx.get("call_key"),
    )
    accuracy = judge_accuracy(params, judge_prompt, tag)
    says_correct = truth if rng.random() < accuracy else not truth
    # Its confidence is its chance of being right on this kind of pair, jittered: drawn
    # after the label, so the labels are those of a judge that gives none.
    confidence = round(min(0.99, max(0.5, accuracy + 0.1 * (float(rng.random()) - 0.5))), 2)
    if says_correct:
        reasoning = "The answer states the same result as the expected output."
    else:
        reasoning = "The answer does not match the expected output."
    named = rules_naming(judge_prompt)[tag]
    reasoning += f" (Simulated: failure tag {tag!r}, named by {named} rule(s).)"
    return {
        "label": "correct" if says_correct else "incorrect",
        "reasoning": reasoning,
        "confidence": confidence,
    }


def _clip(text: Any, limit: int) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _is_correct_label(label: Any) -> bool:
    return label is True or str(label).strip().lower() in {"correct", "true", "pass", "yes"}


def rule_for(failure: Mapping[str, Any]) -> str:
    """A one-line rule naming this failure's tag, with the failure as its example."""
    tag = failure_tag(failure.get("answer", ""), failure.get("correct_output", ""))
    example = _clip(failure.get("input"), 60)
    verb = "Accept" if _is_correct_label(failure.get("human_label")) else "Reject"
    rule = (
        f"{RULE_PREFIX} [tag: {tag}] {verb} answers like {_clip(failure.get('answer'), 40)!r} "
        f"for {example!r} (expected {_clip(failure.get('correct_output'), 40)!r}): "
        f"{_TAG_GUIDANCE[tag]}"
    )
    notes = _clip(failure.get("notes"), 80)
    return f"{rule} Reviewer note: {notes}" if notes else rule


def _number(value: Any) -> str:
    """A metric for prose: two decimals for a fraction, as is for anything else."""
    try:
        return f"{float(value):.2f}"
    except (TypeError, ValueError):
        return str(value)


def simulate_prompt_engineer(params: SimulatorParams, ctx: Mapping[str, Any]) -> dict[str, Any]:
    prompt = str(ctx.get("judge_prompt", ""))
    failures: Sequence[Mapping[str, Any]] = ctx.get("failures") or []
    present = {line.strip() for line in prompt.splitlines()}
    tags = [failure_tag(f.get("answer", ""), f.get("correct_output", "")) for f in failures]
    counts = {t: tags.count(t) for t in FAILURE_TAGS}
    rule = None
    # the most common tag first; another tag only if every rule for it is already there
    for tag in sorted(FAILURE_TAGS, key=lambda t: -counts[t]):
        if not counts[tag]:
            break
        candidates = (rule_for(f) for f, t in zip(failures, tags, strict=True) if t == tag)
        rule = next((r for r in candidates if r not in present), None)
        if rule is not None:
            break
    if rule is None:
        rule = (
            f"{RULE_PREFIX} Compare the answer with the expected output carefully "
            f"(check {count_rules(prompt) + 1})."
        )
    new_prompt = f"{prompt.rstrip()}\n{rule}" if prompt.strip() else rule
    f1 = (ctx.get("metrics") or {}).get("f1")
    named = _TAG_MARKER.search(rule)
    rationale = f"Added one rule learned from {len(failures)} failure(s)"
    if named:
        rationale += f", for the most common kind of failure ({named.group(1)})"
    # the metric arrives unrounded (0.6666666666666666): show it as a person would
    rationale += f" (F1 was {_number(f1)})." if f1 is not None else "."
    # The cases of the tag its rule names (1-based, as the cases were numbered).
    chosen = named.group(1).lower() if named else None
    addressed = [i for i, t in enumerate(tags, start=1) if t == chosen]
    return {"prompt": new_prompt, "rationale": rationale, "addressed": addressed}
