"""Text embeddings for the similarity judge, behind a tiny protocol.

``LocalEmbedder`` runs WordLlama (``wordllama==0.4.0.post1``, MIT licence): static token
embeddings averaged over the text, 256 dimensions (truncatable to 64 or 128), whose
weights (16 MB) and tokenizer ship inside the wheel. It never touches the network: it
loads the two bundled files itself, because ``WordLlama.load()`` in this version looks
for the tokenizer under ``wordllama/tokenizer/`` while the wheel ships it under
``wordllama/tokenizers/``, so it would try to download a file it already has.

Vectors come back L2-normalised (float32), so a cosine similarity is a dot product; an
empty or all-unknown text embeds as the zero vector (similarity 0 to everything) rather
than the NaN that dividing by its zero norm would give.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any, Protocol

import numpy as np

WORDLLAMA_CONFIG = "l2_supercat"
WORDLLAMA_DIMS = (64, 128, 256)


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """An (n, dim) float32 array of unit (or zero) rows."""
        ...


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; zero rows stay zero."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)


def cosine_similarities(answers: np.ndarray, references: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two aligned (n, dim) arrays, in [-1, 1]."""
    a, b = normalise_rows(answers), normalise_rows(references)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} and {b.shape}")
    return np.clip(np.einsum("ij,ij->i", a, b), -1.0, 1.0)


def similarities(
    embedder: Embedder, answers: Sequence[str], references: Sequence[str]
) -> np.ndarray:
    """Cosine similarity of each answer to its reference (the correct output)."""
    if len(answers) != len(references):
        raise ValueError(f"{len(answers)} answers but {len(references)} references")
    vectors = embedder.embed([*answers, *references])
    return cosine_similarities(vectors[: len(answers)], vectors[len(answers) :])


class LocalEmbedder:
    """WordLlama from the files inside its wheel; loaded on first use, thread-safe."""

    def __init__(self, dim: int = 256, batch_size: int = 256) -> None:
        if dim not in WORDLLAMA_DIMS:
            raise ValueError(f"dim must be one of {WORDLLAMA_DIMS}, got {dim}")
        self.dim = dim
        self.name = f"wordllama-{WORDLLAMA_CONFIG}-{dim}"
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                from safetensors import safe_open
                from tokenizers import Tokenizer
                from wordllama.inference import WordLlamaInference

                root = resources.files("wordllama")
                config = root / "tokenizers" / f"{WORDLLAMA_CONFIG}_tokenizer_config.json"
                weights = root / "weights" / f"{WORDLLAMA_CONFIG}_256.safetensors"
                tokenizer = Tokenizer.from_file(str(config))
                with safe_open(str(weights), framework="np") as f:
                    table = f.get_tensor("embedding.weight")[:, : self.dim]
                self._model = WordLlamaInference(table, tokenizer)
            return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        raw = self._load().embed(texts, norm=False, batch_size=self._batch_size)
        return normalise_rows(raw)
