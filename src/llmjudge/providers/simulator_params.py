"""The simulated provider's parameters (``ProviderConfig.settings``) and its seeded
randomness: every simulated answer draws its noise from a hash of the seed and what it
answers, so runs are reproducible."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

__all__ = ["SimulatorParams", "digest", "seeded_rng"]


@dataclass(frozen=True)
class SimulatorParams:
    seed: int = 0
    noise: float = 0.5
    position_bias: float = 0.1
    tie_band: float = 0.1
    criteria_noise: float = 0.5
    score_noise: float = 0.5  # single-answer grades: noise in units of latent quality
    score_bias: float = 0.0  # single-answer grades: scale points added (> 0 lenient, < 0 severe)
    latency_ms_mean: float = 250.0
    latency_ms_jitter: float = 100.0
    fail_429_rate: float = 0.0
    fail_500_rate: float = 0.0
    malformed_rate: float = 0.0
    stream_chunk_chars: int = 12
    retry_after_s: float = 1.0
    task_accuracy: float = 0.7
    judge_base_accuracy: float = 0.65
    judge_gain_per_rule: float = 0.06
    judge_max_accuracy: float = 0.97

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> SimulatorParams:
        """Known keys of ``ProviderConfig.settings``, coerced to each field's type; others ignored."""
        defaults = cls()
        values = {
            f.name: type(getattr(defaults, f.name))(settings[f.name])
            for f in fields(cls)
            if settings.get(f.name) is not None
        }
        return cls(**values)


def digest(*parts: Any) -> bytes:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()


def seeded_rng(*parts: Any) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(digest(*parts)[:16], "big"))
