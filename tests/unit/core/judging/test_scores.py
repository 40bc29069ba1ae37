"""Reading a grade: the number on its declared scale, or a parse failure that says why
(never a clipped or guessed grade)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmjudge.core.judging.calls import ScoreReader, read_reply
from llmjudge.core.judging.formats import VerdictFormat, parse_with_format
from llmjudge.core.judging.scores import ScoreParseError, read_score
from llmjudge.core.judging.verdicts import VerdictParseError

SCORE = VerdictFormat(kind="score")
LIKERT = VerdictFormat(kind="likert")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Rating: [[7]]", 7.0),
        ('The format is "[[rating]]", e.g. "Rating: [[5]]". ... Rating: [[8]]', 8.0),
        ("Rating: [[ 9.5 ]]", 9.5),
        ("[[1]]", 1.0),
        ("Perfect. [[10]]", 10.0),
    ],
)
def test_the_last_mt_bench_rating_is_the_grade(text: str, value: float) -> None:
    assert read_score(text, SCORE).value == value


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Rating: [[11]]", "score 11 is outside the scale 1 to 10"),
        ("Rating: [[0]]", "score 0 is outside the scale 1 to 10"),
        ("Rating: [[-3]]", "score -3 is outside the scale 1 to 10"),
        ("Rating: [[10.5]]", "score 10.5 is outside the scale 1 to 10"),
        ("I would rate it seven.", "no score in the answer"),
        ("   ", "empty judge response"),
    ],
)
def test_what_is_not_a_grade_on_the_scale_fails_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(ScoreParseError, match=says):
        read_score(text, SCORE)


def test_a_custom_rule_reads_its_own_number_on_its_own_scale() -> None:
    fmt = VerdictFormat(kind="score", pattern=r"Score:\s*(\d+)/100", scale=(0, 100))
    assert read_score("Score: 35/100 ... final Score: 87/100", fmt).value == 87
    assert read_score("Score: 0/100", fmt).value == 0
    with pytest.raises(ScoreParseError, match="score 250 is outside the scale 0 to 100"):
        read_score("Score: 250/100", fmt)
    with pytest.raises(ScoreParseError, match="looked for"):
        read_score("Rating: [[7]]", fmt)


def test_likert_reads_every_criterion_and_grades_their_mean() -> None:
    text = "Good.\nAccuracy: [[4]]\n- Level of detail - [[2]]\n**depth**: [[5]]"
    score = read_score(text, LIKERT, ["accuracy", "level_of_detail", "depth"])
    assert score.criteria == {"accuracy": 4, "level_of_detail": 2, "depth": 5}
    assert score.value == pytest.approx(11 / 3)
    with pytest.raises(ScoreParseError, match="no score for depth"):
        read_score("accuracy: [[4]]", LIKERT, ["accuracy", "depth"])
    with pytest.raises(ScoreParseError, match="accuracy score 6 is outside the scale 1 to 5"):
        read_score("accuracy: [[6]]", LIKERT, ["accuracy"])


def test_the_reader_turns_a_bad_grade_into_a_parse_error_of_the_one_pipeline() -> None:
    reader = ScoreReader(SCORE)
    good = read_reply(reader, "Rating: [[6]]", input_tokens=3)
    assert good.verdict is not None and good.verdict.value == 6 and good.parse_error is None
    bad = read_reply(reader, "Rating: [[42]]")
    assert bad.verdict is None and bad.parse_error == "score 42 is outside the scale 1 to 10"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"kind": "score", "scale": [5, 5]}, "min < max"),
        ({"kind": "score", "scale": [1, float("inf")]}, "finite"),
        ({"kind": "score", "pattern": "Score: \\d+"}, "captures the number"),
        ({"kind": "score", "pattern": "(a+)+$"}, "backtracks"),
        ({"kind": "score", "on_unparsed": "tie"}, "on_unparsed must be fail"),
        ({"kind": "likert", "pattern": "(\\d)"}, "score format only"),
        ({"kind": "tags", "scale": [1, 10]}, "score and likert formats only"),
    ],
)
def test_bad_score_formats_are_refused(data: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        VerdictFormat.model_validate(data)


def test_a_score_format_reads_no_pairwise_verdict() -> None:
    with pytest.raises(VerdictParseError, match="grades one answer"):
        parse_with_format("[[A]]", SCORE)
