"""The simulated provider: its parametric model, determinism, and its client behaviour."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import norm, pearsonr

from llmjudge.providers.base import ChatRequest, ProviderConfig, ProviderError
from llmjudge.providers.simulated_personas import (
    FAILURE_TAGS,
    corrupt,
    count_rules,
    failure_tag,
    judge_accuracy,
    normalise,
    paraphrase,
    rule_for,
    rules_naming,
    simulate_judge_label,
    simulate_prompt_engineer,
    simulate_task_answer,
)
from llmjudge.providers.simulator import SimulatorClient, latent_quality, respond, simulate_pairwise
from llmjudge.providers.simulator_params import SimulatorParams

CRITERIA = ["accuracy", {"name": "clarity"}, "tone"]
QUIET = {"latency_ms_mean": 0, "latency_ms_jitter": 0}


def pair(qa: float | None, qb: float | None, key: Any, **extra: Any) -> dict[str, Any]:
    return {
        "task": "pairwise",
        "thread_a": {"id": "a", "quality": qa},
        "thread_b": {"id": "b", "quality": qb},
        "criteria": CRITERIA,
        "call_key": key,
        **extra,
    }


def a_win_rate(params: SimulatorParams, qa: float, qb: float, n: int = 400) -> float:
    wins = [simulate_pairwise(params, pair(qa, qb, k))["winner"] == "A" for k in range(n)]
    return float(np.mean(wins))


# -- pairwise ---------------------------------------------------------------------------------


def test_win_probability_rises_with_quality_difference_as_modelled() -> None:
    params = SimulatorParams(noise=0.5, position_bias=0.0, tie_band=0.05)
    diffs = [-1.0, -0.5, 0.0, 0.5, 1.0, 2.0]
    rates = [a_win_rate(params, d, 0.0) for d in diffs]
    assert rates == sorted(rates) and rates[0] < 0.05 and rates[-1] > 0.95
    # A wins when d + noise*Z > tie_band.
    expected = [norm.sf((params.tie_band - d) / params.noise) for d in diffs]
    assert np.allclose(rates, expected, atol=0.07)


def test_position_bias_shows_as_primacy_in_swapped_pairs() -> None:
    biased = SimulatorParams(noise=0.5, position_bias=0.3, tie_band=0.0)
    first_wins = []
    for k in range(400):
        forward = simulate_pairwise(biased, pair(0.2, 0.2, k))
        swapped = simulate_pairwise(
            biased,
            {
                **pair(0.2, 0.2, k),
                "thread_a": {"id": "b", "quality": 0.2},
                "thread_b": {"id": "a", "quality": 0.2},
            },
        )
        first_wins += [forward["winner"] == "A", swapped["winner"] == "A"]
    assert np.mean(first_wins) > 0.65  # Phi(0.3 / 0.5) = 0.73
    unbiased = SimulatorParams(noise=0.5, position_bias=0.0, tie_band=0.0)
    assert a_win_rate(unbiased, 0.2, 0.2) == pytest.approx(0.5, abs=0.08)


def test_same_seed_and_context_give_the_same_answer() -> None:
    params = SimulatorParams(seed=7)
    ctx = pair(None, None, "cmp-1:0")
    assert simulate_pairwise(params, ctx) == simulate_pairwise(params, dict(ctx))
    verdicts = {json.dumps(simulate_pairwise(params, pair(0, 0, f"cmp-{k}"))) for k in range(30)}
    assert len(verdicts) > 5  # other call keys: other noise
    other_seed = [
        simulate_pairwise(SimulatorParams(seed=8), pair(0, 0, f"cmp-{k}")) for k in range(30)
    ]
    same_seed = [simulate_pairwise(params, pair(0, 0, f"cmp-{k}")) for k in range(30)]
    assert other_seed != same_seed


def test_swapped_order_gets_independent_noise() -> None:
    """Mirrored noise would make every swapped pair agree; independent noise does not."""
    params = SimulatorParams(noise=1.0, position_bias=0.0, tie_band=0.0)
    agree = 0
    for k in range(300):
        forward = simulate_pairwise(params, pair(0.0, 0.0, k))["winner"]
        backward = simulate_pairwise(
            params,
            {
                **pair(0.0, 0.0, k),
                "thread_a": {"id": "b", "quality": 0.0},
                "thread_b": {"id": "a", "quality": 0.0},
            },
        )["winner"]
        agree += (forward == "A") == (backward == "B")
    assert 0.4 < agree / 300 < 0.6


def test_likert_scores_follow_quality() -> None:
    params = SimulatorParams(criteria_noise=0.5)
    qualities = np.random.default_rng(0).standard_normal(300)
    means = [
        np.mean(list(simulate_pairwise(params, pair(float(q), 0.0, i))["scores"]["A"].values()))
        for i, q in enumerate(qualities)
    ]
    assert pearsonr(qualities, means).statistic > 0.8


@given(
    qa=st.floats(-5, 5),
    qb=st.floats(-5, 5),
    noise=st.floats(0, 3),
    bias=st.floats(-1, 1),
    tie=st.floats(0, 1),
    key=st.integers(),
)
def test_pairwise_output_is_always_well_formed(
    qa: float, qb: float, noise: float, bias: float, tie: float, key: int
) -> None:
    params = SimulatorParams(noise=noise, position_bias=bias, tie_band=tie)
    out = simulate_pairwise(params, pair(qa, qb, key))
    assert out["winner"] in {"A", "B", "TIE"}
    assert 0.5 <= out["confidence"] <= 0.99
    for side in ("A", "B"):
        assert list(out["scores"][side]) == ["accuracy", "clarity", "tone"]
        assert all(1 <= s <= 5 and isinstance(s, int) for s in out["scores"][side].values())
    assert out["reasoning"]
    if noise == 0 and abs(qa - qb + bias) >= tie:
        assert out["winner"] == ("A" if qa - qb + bias > 0 else "B")


def test_latent_quality_sources_in_order() -> None:
    pillars = {"7": 1.5}
    assert latent_quality({"id": "t", "quality": -0.3, "pillar_id": 7}, pillars, 0) == -0.3
    assert latent_quality({"id": "t", "pillar_id": 7}, pillars, 0) == 1.5
    hashed = latent_quality({"id": "t", "pillar_id": 8}, pillars, 0)
    assert hashed == latent_quality({"id": "t"}, None, 0)
    assert hashed != latent_quality({"id": "t"}, None, 1)
    spread = [latent_quality({"id": i}, None, 0) for i in range(2000)]
    assert abs(np.mean(spread)) < 0.1 and abs(np.std(spread) - 1) < 0.1


# -- persona training tasks ----------------------------------------------------------------


@given(st.text(max_size=40), st.integers(0, 2**32))
def test_paraphrase_is_equal_and_corruption_is_not(text: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    assert normalise(paraphrase(text, rng)) == normalise(text)
    assert normalise(corrupt(text, rng)) != normalise(text)


def test_task_answers_are_right_at_the_configured_rate() -> None:
    params = SimulatorParams(task_accuracy=0.7)
    right = [
        normalise(
            simulate_task_answer(params, {"input": f"q{i}", "correct_output": f"{i} apples"}, "p")
        )
        == normalise(f"{i} apples")
        for i in range(600)
    ]
    assert np.mean(right) == pytest.approx(0.7, abs=0.06)
    always = {"input": "q", "correct_output": "Paris", "accuracy": 1.0}
    assert normalise(simulate_task_answer(params, always, "p")) == "paris"
    never = {"input": "q", "correct_output": "yes", "accuracy": 0.0}
    assert simulate_task_answer(params, never, "p") == "no"


def judge_accuracy_at(rules: int, n: int = 600, tags: tuple[str, ...] = ("", "")) -> float:
    """Accuracy on pairs that are "42." (formatting) when right and "41" (number) when
    wrong, with ``rules`` rule lines for each of ``tags`` ("" for a rule naming no tag)."""
    params = SimulatorParams()
    lines = [
        f"- Rule: {f'[tag: {tag}] ' if tag else ''}rule {r}\n" for r in range(rules) for tag in tags
    ]
    prompt = "Judge the answer.\n" + "".join(lines)
    hits = 0
    for i in range(n):
        truth = i % 2 == 0
        ctx = {
            "input": f"q{i}",
            "correct_output": "42",
            "answer": "42." if truth else "41",
            "judge_prompt": prompt,
        }
        label = simulate_judge_label(params, ctx)["label"]
        hits += (label == "correct") == truth
    return hits / n


def test_judge_accuracy_rises_with_rules_naming_the_tags_up_to_the_cap() -> None:
    named = ("formatting", "number")
    accuracies = [judge_accuracy_at(r, tags=named) for r in (0, 3, 10)]
    assert accuracies[0] == pytest.approx(0.65, abs=0.06)
    assert accuracies[1] == pytest.approx(0.83, abs=0.06)
    assert accuracies[2] == pytest.approx(0.97, abs=0.03)  # capped
    assert count_rules("x\n  - Rule: a\n- rule: b\n- Rule: c") == 2


def test_prompt_engineer_adds_one_rule_from_a_failure() -> None:
    failure = {
        "input": "Capital of France?",
        "answer": "Paris.",
        "correct_output": "Paris",
        "judge_label": "incorrect",
        "human_label": "correct",
        "notes": "punctuation only",
    }
    ctx = {"judge_prompt": "Judge it.", "failures": [failure], "metrics": {"f1": 0.5}}
    out = simulate_prompt_engineer(SimulatorParams(), ctx)
    assert count_rules(out["prompt"]) == 1 and out["prompt"].startswith("Judge it.\n")
    assert (
        "Accept" in out["prompt"]
        and "punctuation only" in out["prompt"]
        and "0.5" in out["rationale"]
    )
    again = simulate_prompt_engineer(SimulatorParams(), {**ctx, "judge_prompt": out["prompt"]})
    assert count_rules(again["prompt"]) == 2  # same failure: a new, generic rule
    empty = simulate_prompt_engineer(SimulatorParams(), {"judge_prompt": ""})
    assert count_rules(empty["prompt"]) == 1


# -- the honest persona judge: rules help only on the pairs whose failure tag they name ----


def test_irrelevant_rules_do_not_improve_accuracy() -> None:
    params = SimulatorParams()
    irrelevant = "Judge.\n" + "".join(f"- Rule: [tag: omission] rule {r}\n" for r in range(10))
    untagged = "Judge.\n" + "".join(f"- Rule: be careful, check {r}\n" for r in range(10))
    for prompt in (irrelevant, untagged, "Judge.\nRule: [tag: number] not a rule line"):
        for tag in ("formatting", "number"):
            assert judge_accuracy(params, prompt, tag) == params.judge_base_accuracy
    base = judge_accuracy_at(0)
    assert judge_accuracy_at(10, tags=("",)) == pytest.approx(base, abs=0.06)
    assert judge_accuracy_at(10, tags=("omission", "other")) == pytest.approx(base, abs=0.06)
    assert base == pytest.approx(0.65, abs=0.06)


def test_a_rule_naming_the_right_tag_helps_only_on_the_tagged_pairs() -> None:
    params = SimulatorParams()
    prompt = "Judge.\n" + "".join(f"- Rule: [tag: number] rule {r}\n" for r in range(5))
    assert judge_accuracy(params, prompt, "number") == pytest.approx(0.95)
    assert judge_accuracy(params, prompt, "formatting") == params.judge_base_accuracy

    def accuracy(answer: str, truth: bool) -> float:
        hits = 0
        for i in range(500):
            ctx = {"input": f"q{i}", "correct_output": "42", "answer": answer}
            label = simulate_judge_label(params, {**ctx, "judge_prompt": prompt})["label"]
            hits += (label == "correct") == truth
        return hits / 500

    assert accuracy("41", truth=False) == pytest.approx(0.95, abs=0.03)  # tagged "number"
    assert accuracy("42.", truth=True) == pytest.approx(0.65, abs=0.06)  # "formatting"
    out = simulate_judge_label(
        params, {"correct_output": "42", "answer": "41", "judge_prompt": prompt}
    )
    assert "failure tag 'number', named by 5 rule(s)" in out["reasoning"]


def test_a_rule_line_names_at_most_one_tag() -> None:
    counts = rules_naming(
        "- Rule: [tag: number] [tag: exact] x\n- Rule: [TAG: Exact] y\n- Rule: [tag: nope]"
    )
    assert counts == {**dict.fromkeys(FAILURE_TAGS, 0), "number": 1, "exact": 1}


@pytest.mark.parametrize(
    ("answer", "correct", "tag"),
    [
        ("Paris", "Paris", "exact"),
        ("paris.", "Paris", "formatting"),
        ("  Paris\n", "Paris", "formatting"),
        ("41 apples", "42 apples", "number"),
        ("42", "forty-two", "number"),
        ("no", "yes", "flipped"),
        ("the red car", "the big red car", "omission"),
        ("rac", "car", "other"),
        ("", "car", "other"),
    ],
)
def test_failure_tags(answer: str, correct: str, tag: str) -> None:
    assert failure_tag(answer, correct) == tag


@given(st.text(max_size=40), st.integers(0, 2**32))
def test_tags_separate_right_from_wrong_answers(text: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    assert failure_tag(paraphrase(text, rng), text) in {"exact", "formatting"}
    assert failure_tag(corrupt(text, rng), text) in {"number", "flipped", "omission", "other"}


def test_engineer_names_only_tags_it_sees_in_the_failures() -> None:
    def failure(answer: str, correct: str, human: str) -> dict[str, str]:
        return {
            "input": f"q {answer}",
            "answer": answer,
            "correct_output": correct,
            "judge_label": "correct" if human == "incorrect" else "incorrect",
            "human_label": human,
        }

    failures = [
        failure("41", "42", "incorrect"),
        failure("Paris.", "Paris", "correct"),
        failure("7", "8", "incorrect"),
    ]
    out = simulate_prompt_engineer(SimulatorParams(), {"judge_prompt": "J.", "failures": failures})
    added = out["prompt"].splitlines()[-1]
    assert added == rule_for(failures[0]) and "[tag: number]" in added
    assert "Reject" in added and "(number)" in out["rationale"]
    # next time the same failures: another example of the same tag, then the next tag
    second = simulate_prompt_engineer(
        SimulatorParams(), {"judge_prompt": out["prompt"], "failures": failures}
    )
    assert second["prompt"].splitlines()[-1] == rule_for(failures[2])
    third = simulate_prompt_engineer(
        SimulatorParams(), {"judge_prompt": second["prompt"], "failures": failures}
    )
    assert "[tag: formatting]" in third["prompt"].splitlines()[-1]
    named = rules_naming(third["prompt"])
    assert {t for t, k in named.items() if k} == {"number", "formatting"}


def simulated_training(engineer: Any, rounds: int = 8) -> list[tuple[float, float]]:
    """The loop in miniature: judge the pairs, give the engineer the failures, repeat.
    Returns (accuracy on pairs of tags the engineer was shown, on the others) per round."""
    params = SimulatorParams()
    shown = [
        {
            "input": f"s{i}",
            "correct_output": f"{i} apples",
            "answer": f"{i} apples" if i % 2 else f"{i + 1} apples",
        }
        for i in range(120)
    ]
    # other kinds of difference, never among the failures shown
    unseen = [
        {"input": f"u{i}", "correct_output": "yes", "answer": "yes." if i % 2 else "no"}
        for i in range(120)
    ]
    prompt, history = "Judge the answer.", []
    for _ in range(rounds):
        accuracy = []
        failures = []
        for pairs in (shown, unseen):
            hits = 0
            for p in pairs:
                label = simulate_judge_label(params, {**p, "judge_prompt": prompt})["label"]
                truth = normalise(p["answer"]) == normalise(p["correct_output"])
                right = (label == "correct") == truth
                hits += right
                if pairs is shown and not right:
                    human = "correct" if truth else "incorrect"
                    failures.append({**p, "judge_label": label, "human_label": human})
            accuracy.append(hits / len(pairs))
        history.append((accuracy[0], accuracy[1]))
        prompt = engineer(params, {"judge_prompt": prompt, "failures": failures})["prompt"]
    return history


def test_training_improves_only_what_the_engineer_was_shown() -> None:
    history = simulated_training(simulate_prompt_engineer)
    (first_shown, first_unseen), (last_shown, last_unseen) = history[0], history[-1]
    assert last_shown > first_shown + 0.2
    assert abs(last_unseen - first_unseen) < 0.1  # "flipped"/"formatting" never named


def test_an_engineer_writing_irrelevant_rules_gets_nowhere() -> None:
    def vague(params: SimulatorParams, ctx: dict[str, Any]) -> dict[str, str]:
        n = count_rules(ctx["judge_prompt"]) + 1
        return {"prompt": f"{ctx['judge_prompt']}\n- Rule: think harder ({n}).", "rationale": ""}

    history = simulated_training(vague)
    shown = [h[0] for h in history]
    # 120 pairs a round: each round is base accuracy plus noise (sd 0.044), no trend
    assert np.mean(shown) == pytest.approx(0.65, abs=0.04)
    assert all(abs(a - 0.65) < 0.15 for a in shown)
    assert np.mean(shown[-3:]) < np.mean(shown[:3]) + 0.1


# -- the client ------------------------------------------------------------------------------


def client(**settings: Any) -> SimulatorClient:
    max_retries = settings.pop("max_retries", 0)
    return SimulatorClient(
        ProviderConfig(
            5, "sim", "simulator", max_retries=max_retries, settings={**QUIET, **settings}
        )
    )


async def test_plain_chat_is_a_labelled_fixed_reply() -> None:
    result = await client().chat(ChatRequest("judge", [{"role": "user", "content": "ping"}]))
    assert result.model == "simulated:judge" and "simulator" in result.text
    assert result.usage_estimated and result.output_tokens > 0 and result.attempts == 1


async def test_streaming_sends_chunks_of_the_answer() -> None:
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    req = ChatRequest("judge", [{"role": "user", "content": "x"}], context=pair(1.0, 0.0, "k"))
    result = await client(stream_chunk_chars=5).chat(req, on_delta)
    assert "".join(deltas) == result.text and len(deltas) > 3
    assert all(len(d) <= 5 for d in deltas)
    assert json.loads(result.text) == json.loads(respond(SimulatorParams(**QUIET), req))


async def test_failure_rates_match_parameters() -> None:
    sim = client(fail_429_rate=0.2, fail_500_rate=0.1, malformed_rate=0.1)
    outcomes: Counter[str] = Counter()
    req = ChatRequest("judge", [{"role": "user", "content": "x"}], context=pair(0.0, 0.0, 1))
    for _ in range(1000):
        try:
            result = await sim.chat(req)
        except ProviderError as err:
            assert err.retryable and err.attempts == 1
            outcomes[str(err.status)] += 1
            continue
        try:
            json.loads(result.text)
            outcomes["ok"] += 1
        except ValueError:
            outcomes["malformed"] += 1
    assert outcomes["429"] == pytest.approx(200, abs=40)
    assert outcomes["500"] == pytest.approx(100, abs=30)
    assert outcomes["malformed"] == pytest.approx(70, abs=25)  # 10% of the 70% that answer


async def test_injected_failures_go_through_the_retry_loop() -> None:
    sim = client(fail_429_rate=0.5, retry_after_s=0, max_retries=20)
    req = ChatRequest("judge", [{"role": "user", "content": "x"}], context=pair(0.0, 0.0, 1))
    attempts = [(await sim.chat(req)).attempts for _ in range(50)]
    assert max(attempts) > 1 and np.mean(attempts) == pytest.approx(2.0, abs=0.6)


async def test_latency_is_simulated() -> None:
    result = await client(latency_ms_mean=40).chat(
        ChatRequest("m", [{"role": "user", "content": "x"}])
    )
    assert result.latency_s >= 0.04


async def test_unknown_task_is_a_permanent_error() -> None:
    with pytest.raises(ProviderError) as info:
        await client(max_retries=3).chat(ChatRequest("m", [], context={"task": "poetry"}))
    assert info.value.status == 400 and info.value.attempts == 1


def test_settings_are_coerced_and_unknown_keys_ignored() -> None:
    params = SimulatorParams.from_settings({"noise": "0.3", "seed": "4", "backoff_base_s": 0.01})
    assert params.noise == 0.3 and params.seed == 4
