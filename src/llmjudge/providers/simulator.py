"""The built-in simulated provider: a documented parametric model, no network, no key.

It lets the demo run on a fresh machine and lets tests and benchmarks measure accuracy
against a known truth. The task comes from ``ChatRequest.context["task"]``: ``pairwise``,
a persona training task (``task_answer``, ``judge_label``, ``prompt_engineer``: see
``providers.simulated_personas``), or none. Every task reads one parameter set
(``providers.simulator_params.SimulatorParams``).

``pairwise``
    Each thread has a hidden latent quality ``q``: its own ``quality`` if given, else its
    pillar's entry in ``pillar_quality``, else a standard normal drawn from a hash of
    (seed, thread id). With ``d = q_A - q_B + position_bias + noise * N(0, 1)`` the verdict is
    TIE when ``|d| < tie_band``, else A when ``d > 0``, else B; ``confidence`` is
    ``0.5 + 0.49 * tanh(|d|)``; each criterion's Likert score is
    ``clip(round(3 + 1.2 * q + criteria_noise * N(0, 1)), 1, 5)``.
``single`` (single-answer grading)
    The thread's latent quality ``q`` as above; on the scale ``(lo, hi)`` with
    ``mid = (lo + hi) / 2`` and ``unit = (hi - lo) / 6``, the grade is
    ``clip(round(mid + score_bias + unit * (q + score_noise * N(0, 1))), lo, hi)`` (on 1-10
    that is ``5.5 + 1.5 q``, the inverse of the demo's quality from published MT-Bench
    scores; ``score_bias``, 0 by default, makes a lenient or a severe grader),
    written as ``Rating: [[g]]``; a ``likert`` format gets one ``criterion: [[g]]`` line per
    criterion, each with its own noise. It does not read the thread or a reference answer:
    agreement with the pairwise ranking comes only from both reading the same ``q``
    through independent noise.
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
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Mapping
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
from llmjudge.providers.simulated_personas import (
    normalise,
    simulate_judge_label,
    simulate_prompt_engineer,
    simulate_task_answer,
)
from llmjudge.providers.simulator_params import SimulatorParams, digest, seeded_rng


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
    return float(seeded_rng(seed, "quality", str(thread.get("id"))).standard_normal())


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
    rng = seeded_rng(
        params.seed, "pairwise", str(a.get("id")), str(b.get("id")), ctx.get("call_key")
    )
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


def simulate_single(params: SimulatorParams, ctx: Mapping[str, Any]) -> str:
    thread = ctx["thread"]
    q = latent_quality(thread, ctx.get("pillar_quality"), params.seed)
    low, high = (float(x) for x in ctx.get("scale") or (1, 10))
    mid, unit = (low + high) / 2, (high - low) / 6
    rng = seeded_rng(params.seed, "single", str(thread.get("id")), ctx.get("call_key"))

    def grade() -> str:
        noise = params.score_noise * float(rng.standard_normal())
        value = mid + params.score_bias + unit * (q + noise)
        return f"{float(np.clip(round(value), low, high)):g}"

    intro = "Simulated grade (the simulator does not read the thread)."
    if ctx.get("kind") == "likert":
        criteria = [_criterion_name(c) for c in ctx.get("criteria") or []]
        return intro + "\n" + "\n".join(f"{c}: [[{grade()}]]" for c in criteria)
    return f"{intro} Rating: [[{grade()}]]"


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


SIM_EMBED_DIM = 64


def simulate_embedding(text: str) -> list[float]:
    """A unit vector: each word of ``normalise(text)`` adds a hashed unit direction, so
    texts sharing words are similar and ``normalise`` differences vanish."""
    v = np.zeros(SIM_EMBED_DIM)
    for word in normalise(text).split():
        v += seeded_rng("embed", word).standard_normal(SIM_EMBED_DIM)
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
    if task == "single":
        return simulate_single(params, ctx)
    if task == "task_answer":
        prompt_key = digest([dict(m) for m in req.messages]).hex()
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
