"""Static word embeddings (wordllama, weights shipped inside the wheel): the one place that loads them, for the
domain classifier (curated) and the semantic quarantine. Never downloads. No Dagster."""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

import numpy as np

EMBEDDING_MODEL = "wordllama-0.3.9/l2_supercat/256"


@lru_cache(maxsize=2)
def static_embedder(dim: int = 256):
    """The wordllama model at `dim` dimensions, read from the installed wheel (downloads disabled)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    import wordllama

    # wordllama calls logging.basicConfig(level=INFO) on import: undo it, so the process's logging is its own
    root.handlers[:], root.level = handlers, level

    # wordllama looks for bundled tokenizers under "tokenizer/" but ships them under "tokenizers/"; pointing its
    # cache at the package folder finds both the weights and the tokenizer without a network call
    package = Path(wordllama.__file__).parent
    return wordllama.WordLlama.load(dim=dim, cache_dir=package, disable_download=True)


def embed(texts: list[str], dim: int = 256) -> np.ndarray:
    """L2-normalised float32 embeddings, one row per text (cosine similarity = dot product)."""
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    return np.asarray(static_embedder(dim).embed(texts, norm=True), dtype=np.float32)
