"""The demo domain's public surface: what other domains may import."""

from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        "llmjudge.demo.service": ("load_demo",),
    },
)
