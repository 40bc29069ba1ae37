"""The catalog domain's public surface: what other domains may import."""

from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        "llmjudge.catalog.importing": ("parse_thread_file",),
        "llmjudge.catalog.models": (
            "Pillar",
            "Thread",
        ),
        "llmjudge.catalog.schemas": (
            "ImportResult",
            "PillarOut",
            "RowError",
        ),
        "llmjudge.catalog.service": (
            "list_pillars",
            "prompt_key_coverage",
            "store_import",
            "threads_by_ids",
        ),
    },
)
