"""Build the demo data set shipped in the package from ../shared/data/mtbench.

10 MT-Bench questions (spread over the 8 categories) x 6 models. Pillars are models,
threads are two-turn conversations, prompt_key is the question id. Run once; the output
is committed so a fresh install needs no shared data.
"""

import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT.parent / "shared" / "data" / "mtbench" / "answers.jsonl"
OUT = ROOT / "src" / "llmjudge" / "demo" / "mtbench_demo.jsonl"

# Published MT-Bench scores (Zheng et al., 2023, Table 8). The simulator reads the derived
# `quality` so the demo ranking resembles the real one; real judges ignore it.
MODELS = {
    "gpt-4": 8.99,
    "gpt-3.5-turbo": 7.94,
    "claude-v1": 7.90,
    "vicuna-13b-v1.3": 6.39,
    "alpaca-13b": 4.53,
    "llama-13b": 2.61,
}
QUESTIONS = [81, 82, 91, 101, 111, 121, 131, 141, 151, 152]
# Reference answers for the questions with one right answer (MT-Bench grades maths and
# reasoning against a reference), worked out here for both turns; a session's judge reads
# them as {reference} (single-answer grading shows them by default).
REFERENCES = {
    101: (
        "Turn 1: You are in second place; the person you just overtook is now third.\n"
        "Turn 2: You cannot overtake the last person: if you were behind them, they would "
        "not be last. The question has no valid answer as asked."
    ),
    111: (
        "Turn 1: By the shoelace formula the area is "
        "|0*(1 - 3) + (-1)*(3 - 0) + 3*(0 - 1)| / 2 = |-3 - 3| / 2 = 3.\n"
        "Turn 2: The sides from (0, 0) to (-1, 1) and to (3, 3) are perpendicular "
        "((-1)*3 + 1*3 = 0), so the right angle is at the origin and the hypotenuse from "
        "(-1, 1) to (3, 3), of length sqrt(20), is a diameter of the circumscribed circle. "
        "Its radius is sqrt(5) and its area 5*pi, about 15.71."
    ),
}


def _short(question: str) -> str:
    # cut at a word, and say so: a title that stops mid-word reads as run into the next text
    return textwrap.shorten(question, width=60, placeholder="\u2026")


def main() -> int:
    rows = []
    for line in SRC.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        if d["model"] not in MODELS or d["question_id"] not in QUESTIONS:
            continue
        messages = []
        for q, a in zip(d["turns"], d["answers"], strict=True):
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        rows.append(
            {
                "pillar": d["model"],
                "external_id": f"mtbench-{d['question_id']}-{d['model']}",
                "title": f"Q{d['question_id']} ({d['category']}): {_short(d['turns'][0])}",
                "prompt_key": str(d["question_id"]),
                "content": messages,
                "metadata": {
                    "source": "MT-Bench",
                    "category": d["category"],
                    "question_id": d["question_id"],
                    "quality": round((MODELS[d["model"]] - 6.5) / 1.5, 3),
                }
                | (
                    {"reference": REFERENCES[d["question_id"]]}
                    if d["question_id"] in REFERENCES
                    else {}
                ),
            }
        )
    rows.sort(key=lambda r: (r["pillar"], int(r["prompt_key"])))
    OUT.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    print(f"wrote {len(rows)} threads to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
