"""llmjudge: judge LLM outputs with LLMs, and know how far to trust the judge."""

__version__ = "0.1.0"
