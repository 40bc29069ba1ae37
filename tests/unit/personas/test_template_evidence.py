"""The starter templates hold enough pairs for the evidence rule (#27): with the split
shares a persona made from them gets, the split code's real assignment, and the answers
the built-in simulated task model really gives, both held-out splits get at least the
minimum of each human class (convergence's ``min_per_class`` in selection, the gate's
``MIN_CALIBRATION_PER_CLASS`` in calibration), whatever ids the database hands out."""

from __future__ import annotations

import pytest

from llmjudge.core.personas.convergence import ConvergenceRule
from llmjudge.core.personas.gate import MIN_CALIBRATION_PER_CLASS
from llmjudge.core.personas.splits import CALIBRATION, SELECTION, SplitFractions, assign_splits
from llmjudge.core.personas.templates import PersonaTemplate, render_task_prompt
from llmjudge.personas.schemas import PersonaIn
from llmjudge.personas.starters import TEMPLATES
from llmjudge.providers.simulated_personas import normalise, simulate_task_answer
from llmjudge.providers.simulator_params import SimulatorParams, digest

# Pair ids start wherever the shared sequence is: the classes must clear the minimum for
# any start, not for one lucky numbering.
ID_STARTS = range(1, 3000, 7)
MARGIN = 2  # above the minimum, for every start tried


def _human_says_correct(template: PersonaTemplate) -> list[bool]:
    """Per pair, whether the simulated task model's answer is right: what a careful human
    reviewer calls correct. The answer is computed as the loop asks for it (the rendered
    task prompt as the one user message), with the simulator's default settings."""
    params = SimulatorParams()
    out = []
    for pair in template.pairs:
        prompt = render_task_prompt(template.task_prompt, input=pair.input)
        key = digest([{"role": "user", "content": prompt}]).hex()
        context = {"input": pair.input, "correct_output": pair.correct_output}
        answer = simulate_task_answer(params, context, key)
        out.append(normalise(answer) == normalise(pair.correct_output))
    return out


def _fractions(template: PersonaTemplate) -> SplitFractions:
    # as personas.pairs.fractions_of: the held-out share halved into selection and calibration
    held = template.holdout_fraction
    return SplitFractions(1.0 - held, held / 2.0, held / 2.0)


def test_the_minimums_are_those_the_product_applies() -> None:
    # A persona's min_per_class defaults to the rule's: the figures below are the real ones.
    assert PersonaIn.model_fields["min_per_class"].default == ConvergenceRule().min_per_class


@pytest.mark.parametrize("template", list(TEMPLATES.values()), ids=lambda t: t.key)
def test_each_held_out_split_gets_enough_of_each_human_class(template: PersonaTemplate) -> None:
    need = {SELECTION: ConvergenceRule().min_per_class, CALIBRATION: MIN_CALIBRATION_PER_CLASS}
    truth = _human_says_correct(template)
    # Not balanced by construction: the simulated task model is wrong on some pairs only.
    assert 0.5 < sum(truth) / len(truth) < 0.9
    fewest = {(split, cls): len(truth) for split in need for cls in (True, False)}
    for start in ID_STARTS:
        # Template pairs carry no human label when stored, so all fall in one stratum.
        plan = assign_splits(
            [(start + i, None) for i in range(len(truth))], fractions=_fractions(template)
        )
        for (split, cls), low in fewest.items():
            k = sum(plan[start + i] == split and t is cls for i, t in enumerate(truth))
            fewest[(split, cls)] = min(low, k)
    short = {
        f"{split} {'correct' if cls else 'incorrect'}": k
        for (split, cls), k in fewest.items()
        if k < need[split] + MARGIN
    }
    assert not short, f"{template.key}: fewest pairs per split and class {short}, need {need}"
