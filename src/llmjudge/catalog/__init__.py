"""The catalog domain's public surface: what other domains may import."""

from llmjudge.catalog.importing import parse_thread_file
from llmjudge.catalog.models import Pillar, Thread
from llmjudge.catalog.schemas import ImportResult, PillarOut, RowError
from llmjudge.catalog.service import list_pillars, prompt_key_coverage, store_import, threads_by_ids

__all__ = [
    "ImportResult",
    "Pillar",
    "PillarOut",
    "RowError",
    "Thread",
    "list_pillars",
    "parse_thread_file",
    "prompt_key_coverage",
    "store_import",
    "threads_by_ids",
]
