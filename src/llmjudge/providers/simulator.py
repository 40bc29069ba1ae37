"""The built-in simulated provider: a documented parametric model, no network, no key.

It lets the demo run on a fresh machine and lets tests and benchmarks measure accuracy
against a known truth. The task comes from ``ChatRequest.context["task"]``:

``pairwise``
    Each thread has a hidden latent quality ``q``: its own ``quality`` if given, else its
    pillar's entry in ``pillar_quality``, else a standard normal drawn from a hash of
    (seed, thread id). With ``d = q_A - q_B + position_bias + noise * N(0, 1)`` the verdict is
    TIE when ``|d| < tie_band``, else A when ``d > 0``, else B; ``confidence`` is
    ``0.5 + 0.49 * tanh(|d|)``; each criterion's Likert score is
    ``clip(round(3 + 1.2 * q + criteria_noise * N(0, 1)), 1, 5)``.
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
no task
    A short fixed reply saying it is the simulator.
embeddings (``embed``)
    Each word of the normalised text adds a hashed Gaussian direction (64 dimensions); the
    sum is scaled to unit length. Texts that share words are similar; no meaning is modelled.

Answers are deterministic: each call's randomness is seeded from (seed, task, ids, and the
context's ``call_key``), so runs are reproducible while a swapped pair, or another attempt
with a different ``call_key``, gets independent noise. Latency (uniform in
``latency_ms_mean +- latency_ms_jitter``) and injected failures (``fail_429_rate``,
``fail_500_rate``: raised as ``ProviderError`` through the shared retry loop; ``malformed_rate``:
a 200 whose JSON is cut in half) are drawn from a per-client stream seeded with ``seed``,
so a retried call can succeed.

One piece (about 500 lines): the simulated judge, task model, prompt engineer and embedder
share one seeded parameter set, documented in one place.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from llmjudge.providers.base import (
    ChatRequest,
    ChatResult,
    DeltaCallback,
    ProviderConfig,
    ProviderError,
    call_with_retries,
    estimate_tokens,
    messages_text,
)

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


@dataclass(frozen=True)
class SimulatorParams:
    seed: int = 0
    noise: float = 0.5
    position_bias: float = 0.1
    tie_band: float = 0.1
    criteria_noise: float = 0.5
    latency_ms_mean: float = 250.0
    latency_ms_jitter: float = 100.0
    fail_429_rate: float = 0.0
    fail_500_rate: float = 0.0
    malformed_rate: float = 0.0
    stream_chunk_chars: int = 12
    retry_after_s: float = 1.0
    task_accuracy: float = 0.7
    judge_base_accuracy: float = 0.65
    judge_gain_per_rule: float = 0.06
    judge_max_accuracy: float = 0.97

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> SimulatorParams:
        """Known keys of ``ProviderConfig.settings``, coerced to each field's type; others ignored."""
        defaults = cls()
        values = {
            f.name: type(getattr(defaults, f.name))(settings[f.name])
            for f in fields(cls)
            if settings.get(f.name) is not None
        }
        return cls(**values)


# -- seeded randomness ---------------------------------------------------------------------------


def _digest(*parts: Any) -> bytes:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()


def _rng(*parts: Any) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(_digest(*parts)[:16], "big"))


# -- pairwise ----------------------------------------------------------------------------------


def latent_quality(
    thread: Mapping[str, Any], pillar_quality: Mapping[Any, float] | None, seed: int
) -> float:
    if thread.get("quality") is not None:
        return float(thread["quality"])
    pillar = thread.get("pillar_id")
    if pillar is not None and pillar_quality:
        for key in (pillar, str(pillar)):
            if key in pillar_quality:
                return float(pillar_quality[key])
    return float(_rng(seed, "quality", str(thread.get("id"))).standard_normal())


def _criterion_name(criterion: Any) -> str:
    if isinstance(criterion, Mapping):
        return str(criterion.get("name") or criterion.get("key") or criterion.get("id"))
    return str(criterion)


def likert(quality: float, noise: float) -> int:
    return int(np.clip(round(3 + 1.2 * quality + noise), 1, 5))


def simulate_pairwise(params: SimulatorParams, ctx: Mapping[str, Any]) -> dict[str, Any]:
    a, b = ctx["thread_a"], ctx["thread_b"]
    pillar_quality = ctx.get("pillar_quality")
    qa = latent_quality(a, pillar_quality, params.seed)
    qb = latent_quality(b, pillar_quality, params.seed)
    rng = _rng(params.seed, "pairwise", str(a.get("id")), str(b.get("id")), ctx.get("call_key"))
    diff = qa - qb + params.position_bias + params.noise * float(rng.standard_normal())
    if abs(diff) < params.tie_band:
        winner = "TIE"
    else:
        winner = "A" if diff > 0 else "B"
    criteria = [_criterion_name(c) for c in ctx.get("criteria") or []]
    noise = params.criteria_noise * rng.standard_normal((2, len(criteria)))
    scores = {
        "A": {c: likert(qa, float(n)) for c, n in zip(criteria, noise[0], strict=True)},
        "B": {c: likert(qb, float(n)) for c, n in zip(criteria, noise[1], strict=True)},
    }
    return {
        "winner": winner,
        "confidence": round(0.5 + 0.49 * math.tanh(abs(diff)), 2),
        "scores": scores,
        "reasoning": _pairwise_reasoning(winner, scores, criteria),
    }


def _number_int(value: float) -> str:
    """A Likert score in prose: 4, or 3.5 when it is not whole."""
    return f"{round(float(value), 1):g}"


def _pairwise_reasoning(
    winner: str, scores: Mapping[str, Mapping[str, int]], criteria: list[str]
) -> str:
    if winner == "TIE":
        return "Both responses are of similar quality; neither is clearly better overall."
    loser = "B" if winner == "A" else "A"
    if not criteria:
        return f"Response {winner} is clearer and more complete than Response {loser}."
    gaps = [scores[winner][c] - scores[loser][c] for c in criteria]
    best = criteria[int(np.argmax(gaps))]
    return (
        f"Response {winner} is better overall. The clearest difference is {best} "
        f"({_number_int(scores[winner][best])} vs {_number_int(scores[loser][best])}); "
        f"Response {loser} falls short there."
    )


# -- persona training tasks -------------------------------------------------------------------


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
    rng = _rng(params.seed, "task_answer", str(ctx.get("input", "")), prompt_key)
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
    rng = _rng(
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


SIM_EMBED_DIM = 64


def simulate_embedding(text: str) -> list[float]:
    """A unit vector: each word of ``normalise(text)`` adds a hashed unit direction, so
    texts sharing words are similar and ``normalise`` differences vanish."""
    v = np.zeros(SIM_EMBED_DIM)
    for word in normalise(text).split():
        v += _rng("embed", word).standard_normal(SIM_EMBED_DIM)
    norm = float(np.linalg.norm(v))
    return (v / norm).round(6).tolist() if norm > 0 else v.tolist()


def plain_reply(model: str) -> str:
    return f"Hello from the llmjudge simulator ({model}). No real model was called."


def respond(params: SimulatorParams, req: ChatRequest) -> str:
    """The simulated answer text for a request (pure and deterministic)."""
    ctx = req.context or {}
    task = ctx.get("task")
    if task == "pairwise":
        return json.dumps(simulate_pairwise(params, ctx))
    if task == "task_answer":
        prompt_key = _digest([dict(m) for m in req.messages]).hex()
        return simulate_task_answer(params, ctx, prompt_key)
    if task == "judge_label":
        return json.dumps(simulate_judge_label(params, ctx))
    if task == "prompt_engineer":
        return json.dumps(simulate_prompt_engineer(params, ctx))
    if task is None:
        return plain_reply(req.model)
    raise ValueError(f"unknown simulator task {task!r}")


def malform(text: str) -> str:
    """Broken output, as a real model sometimes produces: the JSON cut off half-way."""
    return text[: max(1, len(text) // 2)]


class SimulatorClient:
    """``ProviderClient`` over ``respond``, with simulated latency, failures and streaming."""

    def __init__(self, cfg: ProviderConfig) -> None:
        self.cfg = cfg
        self.params = SimulatorParams.from_settings(cfg.settings)
        self._chaos = random.Random(self.params.seed)

    async def chat(self, req: ChatRequest, on_delta: DeltaCallback = None) -> ChatResult:
        return await call_with_retries(self.cfg, lambda: self._attempt(req, on_delta))

    def _error(
        self, cause: str, status: int | None, retryable: bool, retry_after: float | None = None
    ) -> ProviderError:
        return ProviderError(
            self.cfg.name,
            "simulator",
            cause,
            status=status,
            retryable=retryable,
            retry_after=retry_after,
        )

    async def _attempt(self, req: ChatRequest, on_delta: DeltaCallback) -> ChatResult:
        start = time.perf_counter()
        p = self.params
        low, high = p.latency_ms_mean - p.latency_ms_jitter, p.latency_ms_mean + p.latency_ms_jitter
        latency_s = max(0.0, self._chaos.uniform(low, high)) / 1000
        roll = self._chaos.random()
        if roll < p.fail_429_rate:
            raise self._error("rate limited (429)", 429, True, p.retry_after_s)
        if roll < p.fail_429_rate + p.fail_500_rate:
            raise self._error("server error (500): simulated failure", 500, True)
        try:
            text = respond(p, req)
        except (KeyError, TypeError, ValueError) as exc:
            raise self._error(f"bad request: {exc}", 400, False) from None
        if self._chaos.random() < p.malformed_rate:
            text = malform(text)
        if on_delta is None:
            await asyncio.sleep(latency_s)
        else:
            size = max(1, p.stream_chunk_chars)
            chunks = [text[i : i + size] for i in range(0, len(text), size)] or [""]
            for chunk in chunks:
                await asyncio.sleep(latency_s / len(chunks))
                if chunk:
                    await on_delta(chunk)
        return ChatResult(
            text=text,
            input_tokens=estimate_tokens(messages_text(req.messages)),
            output_tokens=estimate_tokens(text),
            usage_estimated=True,
            latency_s=time.perf_counter() - start,
            attempts=1,
            model=f"simulated:{req.model}",
            finish_reason="stop",
        )

    async def embed(self, model: str, texts: list[str]) -> ChatResult:
        """Deterministic bag-of-words vectors (``simulate_embedding``), no latency."""
        vectors = [simulate_embedding(t) for t in texts]
        return ChatResult(
            text=json.dumps(vectors),
            input_tokens=sum(estimate_tokens(t) for t in texts),
            output_tokens=0,
            usage_estimated=True,
            latency_s=0.0,
            attempts=1,
            model=f"simulated:{model}",
        )

    async def aclose(self) -> None:
        return None
