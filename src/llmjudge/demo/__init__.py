"""The demo domain's public surface: what other domains may import."""

from llmjudge.demo.service import load_demo

__all__ = [
    "load_demo",
]
