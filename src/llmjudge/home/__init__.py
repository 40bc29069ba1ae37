"""The home page. Only the web composition root mounts it: it exports nothing."""

__all__: list[str] = []
