"""The simulator's persona tasks stay honest and inspectable: the judge's confidence is its
documented chance of being right (jittered), the engineer says which cases its one rule
addresses, and simulated embeddings are unit vectors of shared words."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.providers.simulated_personas import (
    failure_tag,
    judge_accuracy,
    simulate_judge_label,
    simulate_prompt_engineer,
)
from llmjudge.providers.simulator import simulate_embedding
from llmjudge.providers.simulator_params import SimulatorParams


@given(st.text(max_size=20), st.text(max_size=20), st.integers(0, 3))
def test_judge_confidence_is_its_chance_of_being_right(answer: str, ref: str, rules: int) -> None:
    tag = failure_tag(answer, ref)
    prompt = "J.\n" + "".join(f"- Rule: [tag: {tag}] x{i}\n" for i in range(rules))
    params = SimulatorParams()
    out = simulate_judge_label(
        params, {"answer": answer, "correct_output": ref, "judge_prompt": prompt, "input": "q"}
    )
    p = judge_accuracy(params, prompt, tag)
    assert 0.5 <= out["confidence"] <= 0.99
    assert abs(out["confidence"] - min(0.99, max(0.5, p))) <= 0.05 + 1e-9
    assert f"failure tag {tag!r}, named by {rules} rule(s)" in out["reasoning"]


def test_engineer_names_the_cases_of_its_rule() -> None:
    failures = [
        {"answer": "5", "correct_output": "4", "input": "2+2", "judge_label": "correct"},
        {"answer": "yes", "correct_output": "no", "input": "a?", "judge_label": "correct"},
        {"answer": "7", "correct_output": "6", "input": "3+3", "judge_label": "correct"},
    ]
    out = simulate_prompt_engineer(SimulatorParams(), {"judge_prompt": "J.", "failures": failures})
    assert "[tag: number]" in out["prompt"]
    assert out["addressed"] == [1, 3]  # the two number failures, not the flipped one
    none = simulate_prompt_engineer(SimulatorParams(), {"judge_prompt": "J.", "failures": []})
    assert none["addressed"] == []


@given(st.text(max_size=40))
def test_simulated_embeddings_are_unit_or_zero(text: str) -> None:
    v = np.asarray(simulate_embedding(text))
    norm = float(np.linalg.norm(v))
    assert v.shape == (64,) and (norm == 0.0 or abs(norm - 1.0) < 1e-5)
    # case and outer spaces are normalised away
    assert simulate_embedding(f"  {text.casefold()} ") == simulate_embedding(text.casefold())


def test_shared_words_are_closer() -> None:
    a, b, c = (np.asarray(simulate_embedding(t)) for t in ("red apple", "red apples", "blue sky"))
    assert float(a @ b) > float(a @ c)
