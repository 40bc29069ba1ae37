"""The simulated grader: grades from the latent quality through noise on the scale, in
the format the session reads; labelled simulated."""

from __future__ import annotations

import numpy as np
import pytest

from llmjudge.core.judging.formats import VerdictFormat
from llmjudge.core.judging.scores import read_score
from llmjudge.providers.simulator import simulate_single
from llmjudge.providers.simulator_params import SimulatorParams


def _grade(params: SimulatorParams, quality: float, key: object, **ctx: object) -> str:
    context = {"thread": {"id": 1, "quality": quality}, "call_key": key, **ctx}
    return simulate_single(params, context)


@pytest.mark.parametrize(("quality", "grade"), [(0.0, 6), (1.0, 7), (-2.0, 2), (5.0, 10)])
def test_without_noise_the_grade_is_the_scaled_quality(quality: float, grade: int) -> None:
    text = _grade(SimulatorParams(score_noise=0.0), quality, "k")
    assert "Simulated" in text  # labelled
    assert read_score(text, VerdictFormat(kind="score")).value == grade


def test_noise_spreads_grades_around_the_quality_as_parameterised() -> None:
    fmt = VerdictFormat(kind="score", scale=(0, 60))
    grades = [
        read_score(_grade(SimulatorParams(score_noise=1.0), 0.0, k, scale=[0, 60]), fmt).value
        for k in range(2000)
    ]
    # mid 30, unit 10: sd about 10 (one latent unit of noise), rounding aside
    assert np.mean(grades) == pytest.approx(30, abs=0.8)
    assert np.std(grades) == pytest.approx(10, rel=0.1)


def test_likert_writes_every_criterion_on_its_scale() -> None:
    text = _grade(
        SimulatorParams(), 1.0, "k", kind="likert", scale=[1, 5], criteria=["accuracy", "depth"]
    )
    score = read_score(text, VerdictFormat(kind="likert"), ["accuracy", "depth"])
    assert set(score.criteria) == {"accuracy", "depth"}
    assert all(1 <= v <= 5 for v in score.criteria.values())


@pytest.mark.parametrize(("bias", "grade"), [(0.0, 6), (2.0, 8), (-3.5, 2), (9.0, 10)])
def test_a_score_bias_shifts_grades_in_scale_points_and_stays_on_the_scale(
    bias: float, grade: int
) -> None:
    text = _grade(SimulatorParams(score_noise=0.0, score_bias=bias), 0.0, "k")
    assert read_score(text, VerdictFormat(kind="score")).value == grade
