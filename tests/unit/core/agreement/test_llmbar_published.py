"""The published LLMBar figures, recomputed offline from the recorded judge answers.

Each recorded completion is read with a ``labels`` verdict format built from the
release's own parsing rules (tried in order on the stripped answer, case-sensitively;
"1" = Output (a) as shown), swapped answers are mapped back to the pair's order, and
the agreement functions give accuracy (per judgment, both orders) and positional
agreement (consistency). An answer no rule reads counts as a tie, which is never the
gold label: the release counts it as wrong, and it agrees with no readable verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmjudge.core.agreement.judges import Judgment, agreement_report, to_pair_order
from llmjudge.core.judging.formats import VerdictFormat, parse_with_format

SLOT = {"1": "A", "2": "B"}
SET_FILE = {"LLMBar/Natural": "LLMBar-Natural", "Processed/MT-Bench": "Processed-MT-Bench"}


def _published(llmbar_dir: Path) -> list[dict[str, object]]:
    return json.loads((llmbar_dir / "published.json").read_text())


def _read_jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _format(llmbar_dir: Path, judge: str, strategy: str) -> VerdictFormat:
    rules = json.loads((llmbar_dir / "prompts" / f"{judge}-{strategy}.parsing.json").read_text())
    return VerdictFormat.model_validate(
        {
            "kind": "labels",
            "match": "rule_order",
            "on_unparsed": "tie",
            "rules": [{"pattern": rules[key], "winner": SLOT[key]} for key in ("1", "2")],
        }
    )


def _cases() -> list[tuple[str, str, str]]:
    return [
        ("LLMBar/Natural", judge, strategy)
        for judge in ("GPT-4", "ChatGPT")
        for strategy in ("Vanilla", "CoT", "Vanilla_NoRules")
    ] + [("Processed/MT-Bench", judge, "Vanilla_NoRules") for judge in ("GPT-4", "ChatGPT")]


@pytest.mark.parametrize(("dataset", "judge", "strategy"), _cases())
def test_published_figures_are_reproduced(
    llmbar_dir: Path, dataset: str, judge: str, strategy: str
) -> None:
    stem = SET_FILE[dataset]
    pairs = _read_jsonl(llmbar_dir / f"pairs-{stem}.jsonl")
    records = _read_jsonl(llmbar_dir / f"judgments-{stem}-{judge}-{strategy}.jsonl")
    published = next(
        p
        for p in _published(llmbar_dir)
        if (p["set"], p["judge"], p["strategy"]) == (dataset, judge, strategy)
    )
    fmt = _format(llmbar_dir, judge, strategy)
    gold = {str(p["id"]): SLOT[str(p["label"])] for p in pairs}
    assert len(gold) == published["n"]

    judgments = []
    for i, record in enumerate(records):
        parsed = parse_with_format(str(record["completion"]), fmt)
        swapped = record["order"] == "swapped"
        judgment = Judgment(str(record["id"]), i, parsed.winner, swapped=swapped)
        judgments.append(judgment)
        # The release's own reading of this answer, in the pair's numbering.
        release = record["winner"]
        expected = "TIE" if release is None else SLOT[str(release)]
        assert judgment.in_pair_order == expected, record["completion"][-200:]
        assert (parsed.unparsed is not None) == (release is None)
    assert len(judgments) == 2 * published["n"]
    assert {j.swapped for j in judgments} == {False, True}

    report = agreement_report(judgments, gold, rounds=200)
    assert report.judgments == 2 * published["n"] and report.unlabelled == 0
    assert report.accuracy.n == 2 * published["n"]
    assert report.consistency.n == published["n"]  # every instance judged in both orders
    accuracy = 100 * report.accuracy.value
    positional = 100 * report.consistency.value
    assert accuracy == pytest.approx(published["accuracy"], abs=0.5)
    assert positional == pytest.approx(published["positional_agreement"], abs=0.5)
    # The data allow an exact match: the same counts, not merely within half a point.
    assert round(accuracy, 6) == round(float(published["accuracy"]), 6)
    assert round(positional, 6) == round(float(published["positional_agreement"]), 6)
    # Every figure carries its interval, and the interval holds the figure.
    for estimate in (report.accuracy, report.consistency, report.kappa, report.f1):
        assert estimate.low is not None and estimate.high is not None
        assert estimate.low <= estimate.value <= estimate.high


def test_swapped_answers_are_mapped_back(llmbar_dir: Path) -> None:
    # "Output (a)" in a swapped call showed output_2 first, so it means output_2 won.
    fmt = _format(llmbar_dir, "GPT-4", "Vanilla")
    parsed = parse_with_format("Output (a)", fmt)
    assert parsed.winner == "A"
    assert to_pair_order(parsed.winner, swapped=True) == "B"
