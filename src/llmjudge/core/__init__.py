"""The pure core: what llmjudge computes, with no database, network, files or web framework.

The rule: a module under ``core/`` imports only other core modules and computation
libraries (numpy, scipy, markupsafe...), never infrastructure or a domain, and does no
I/O; ``tests/unit/test_architecture.py`` checks it by path. Callers bring the data in and
store what comes out, so everything here is tested without a server.

- ``judging``: judge prompts, reading verdicts, verdict formats, panel maths.
- ``tournaments``: comparison plans, cost estimates, adaptive design, simulation, imports
  of other tools' judgment files.
- ``ratings``: Elo, Bradley-Terry with its intervals, ties, style control, the report.
- ``analysis``: outcomes, leaderboards, position bias, performance, categories, findings,
  tournament quality.
- ``agreement``: agreement of judges with labels and of people with each other.
- ``stats``: the one Wilson interval, Cohen's kappa and bootstrap; undefined is None (NaN
  inside arrays).
- ``personas``: the persona calibration loop's maths, splits, gate and templates.
- ``charts``: server-rendered SVG charts.
- ``text``: untrusted text shown safely (Markdown, diffs) and CSV that cannot execute.
- ``access``: who may call what, one table of path patterns.
- ``review``: the rules of the human pairwise review queue.
- ``fields``: one dataclass built from another's same-named fields.
"""
