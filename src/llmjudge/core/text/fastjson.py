"""JSON encoding on the hot paths (a judge call's request body, its events): orjson, several
times faster than the standard encoder, which still takes what orjson refuses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["dumps"]

# Mapping keys that are not strings become strings (as the standard encoder does); datetimes
# and dataclasses go to ``default`` (the standard encoder knows neither).
_OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)


def dumps(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """Compact UTF-8 JSON of ``value``."""
    try:
        return orjson.dumps(value, default=default, option=_OPTIONS)
    except TypeError:  # an integer past 64 bits: the standard encoder takes any
        return json.dumps(
            value, ensure_ascii=False, separators=(",", ":"), default=default
        ).encode()
