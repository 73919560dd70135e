"""Static word embeddings (wordllama, weights shipped inside the wheel): the one place that loads them, for the
domain classifier (curated) and the semantic quarantine. Never downloads. No Dagster."""

from __future__ import annotations

import hashlib
import logging
from functools import lru_cache
from pathlib import Path

import numpy as np

EMBEDDING_MODEL = "wordllama-0.3.9/l2_supercat/256"
BATCH = 64  # texts tokenized per call (wordllama's own default batch)


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


@lru_cache(maxsize=2)
def model_sha256(dim: int = 256) -> str:
    """sha256 of the model's embedding table (float32 row-major) and its tokenizer's JSON: what stored vectors were
    made with, so a changed model is a new version of them even under the same `EMBEDDING_MODEL` name."""
    model = static_embedder(dim)
    digest = hashlib.sha256(np.ascontiguousarray(model.embedding, dtype=np.float32).tobytes())
    digest.update(model.tokenizer.to_str().encode())
    return digest.hexdigest()


@lru_cache(maxsize=2)
def _unpadded_tokenizer(dim: int = 256):
    """wordllama's tokenizer without its padding: each text's ids are exactly the unpadded ones it pads."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(static_embedder(dim).tokenizer.to_str())
    tokenizer.no_padding()
    return tokenizer


def embed(texts: list[str], dim: int = 256) -> np.ndarray:
    """L2-normalised float32 embeddings, one row per text (cosine similarity = dot product).

    The same bits as wordllama's `embed(texts, norm=True)` (mean of the tokens' vectors, then L2 norm;
    tests/curated/test_embeddings.py), without its padding: wordllama gathers a (batch x longest text x dim)
    array and masks the padding out, which for a batch of page heads is mostly padding (15x the work here).
    Each text's vectors are summed in token order over its own tokens only, the same float32 additions. The ids
    come from the tokenizer without padding (nothing to mask out) and without character offsets
    (`encode_batch_fast`: the same ids, ~30% less tokenizer CPU on page heads)."""
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    table = static_embedder(dim).embedding
    tokenizer = _unpadded_tokenizer(dim)
    out = np.empty((len(texts), table.shape[1]), dtype=np.float32)
    for start in range(0, len(texts), BATCH):
        encodings = tokenizer.encode_batch_fast(list(texts[start : start + BATCH]), add_special_tokens=False)
        pooled = np.empty((len(encodings), table.shape[1]), dtype=np.float32)
        for j, enc in enumerate(encodings):
            ids = np.asarray(enc.ids, dtype=np.int32)
            np.clip(ids, 0, table.shape[0] - 1, out=ids)
            pooled[j] = table[ids].sum(axis=0, dtype=np.float32) / np.float32(max(len(ids), 1))
        with np.errstate(invalid="ignore"):  # an empty text: 0/0, NaN as wordllama gives
            pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        out[start : start + len(encodings)] = pooled
    return out
