"""The shipped demo data: titles are cut at a word and say they are cut."""

from __future__ import annotations

import json

from llmjudge.demo.service import DEMO_FILE


def test_demo_titles_end_at_a_word() -> None:
    rows = [json.loads(line) for line in DEMO_FILE.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 60
    for row in rows:
        question = row["content"][0]["content"]
        shown = row["title"].split(": ", 1)[1]
        if shown.endswith("\u2026"):
            kept = shown[:-1]
            # the kept words are the question's first words, and the next character of the
            # question is a space: no word is cut
            assert question.startswith(kept) and question[len(kept)] == " ", row["title"]
        else:
            assert shown == question, row["title"]
