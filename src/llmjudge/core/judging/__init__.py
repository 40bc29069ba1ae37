"""Judging, the pure part: the judge's prompt (``prompts``), reading its reply into a
verdict (``verdicts``), verdict formats as data (``formats``) and the maths of judge
panels: aggregates, cascades, the report (``panels``)."""
