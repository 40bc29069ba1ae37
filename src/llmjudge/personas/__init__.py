"""Judge personas: calibration against human review, and trained personas at work.

Only the composition roots mount its routes and runner; no other domain imports it yet."""

__all__: list[str] = []
