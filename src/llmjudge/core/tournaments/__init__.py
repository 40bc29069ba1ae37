"""Tournaments, the pure part: which threads meet (``pairing``), what a session will cost
before it runs (``estimate``), the adaptive design that picks each next batch and decides
when to stop (``adaptive``), simulated adaptive sessions (``simulation``), and other
tools' judgment files read as llmjudge's import rows (``converters``)."""
