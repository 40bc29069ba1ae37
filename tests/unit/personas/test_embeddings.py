"""The local embedder: bundled weights, no network, unit vectors, sensible similarities."""

from __future__ import annotations

import socket
import subprocess
import sys

import numpy as np
import pytest

from llmjudge.core.personas.similarity import fit_threshold
from llmjudge.personas.embeddings import (
    LocalEmbedder,
    cosine_similarities,
    normalise_rows,
    similarities,
)
from tests.conftest import REPO


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def test_embeds_offline_in_a_fresh_process_with_sockets_blocked() -> None:
    """A new interpreter where every connection attempt raises, and no HOME cache."""
    code = (
        "import socket\n"
        "def no(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = no; socket.create_connection = no; socket.getaddrinfo = no\n"
        "from llmjudge.personas.embeddings import LocalEmbedder\n"
        "v = LocalEmbedder().embed(['Paris is the capital', 'The capital is Paris'])\n"
        "print(v.shape, round(float(v[0] @ v[1]), 2))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO / "src"), "HOME": "/nonexistent", "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stderr
    shape, sim = out.stdout.split(") ")
    assert shape == "(2, 256" and float(sim) > 0.8


def test_vectors_are_unit_rows_and_empty_text_is_zero(
    embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise OSError("network used")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    v = embedder.embed(["The capital of France is Paris.", "", "hello\x00world"])
    assert v.shape == (3, 256) and v.dtype == np.float32
    assert np.linalg.norm(v, axis=1) == pytest.approx([1.0, 0.0, 1.0], abs=1e-5)
    assert not np.isnan(v).any()
    assert embedder.embed([]).shape == (0, 256)
    assert embedder.name == "wordllama-l2_supercat-256"


def test_similar_meanings_are_closer_than_unrelated_ones(embedder: LocalEmbedder) -> None:
    sims = similarities(
        embedder,
        ["Paris is France's capital", "Bananas are yellow", "The answer is 42"],
        ["The capital of France is Paris", "The capital of France is Paris", "42"],
    )
    assert sims[0] > 0.8 and sims[1] < 0.3 and sims[0] > sims[2] > sims[1]
    with pytest.raises(ValueError):
        similarities(embedder, ["a"], [])


def test_truncated_dimensions() -> None:
    small = LocalEmbedder(dim=64)
    assert small.embed(["some text"]).shape == (1, 64)
    with pytest.raises(ValueError):
        LocalEmbedder(dim=100)


def test_fit_on_embedded_answers(embedder: LocalEmbedder) -> None:
    """End to end on a few pairs: paraphrases accepted, unrelated answers rejected."""
    references = ["Paris", "The boiling point of water is 100 degrees Celsius"] * 3
    answers = [
        "paris",
        "Water boils at 100 degrees Celsius",
        "The Paris of France",
        "Water boils at 100 Celsius degrees",
        "Bananas grow on trees",
        "The stock market closed higher today",
    ]
    human = [True, True, True, True, False, False]
    fit = fit_threshold(similarities(embedder, answers, references), human)
    assert fit.metrics.f1 == 1.0 and 0.0 < fit.threshold < 1.0


def test_row_helpers() -> None:
    rows = normalise_rows(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert rows.ravel() == pytest.approx([0.6, 0.8, 0.0, 0.0])
    sims = cosine_similarities(
        np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([[2.0, 0.0], [-1.0, -1.0]])
    )
    assert sims == pytest.approx([1.0, -1.0])
    with pytest.raises(ValueError):
        cosine_similarities(np.ones((2, 2)), np.ones((3, 2)))
