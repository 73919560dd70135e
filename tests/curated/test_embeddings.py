"""assets/embeddings.embed: wordllama's mean-pooled, L2-normalised embeddings, computed without its padding."""

from __future__ import annotations

import numpy as np

from assets.curated.domain import EVAL_PATH, MAX_CHARS, read_jsonl, url_words
from assets.embeddings import embed, static_embedder


def test_embed_gives_wordllamas_own_bits_on_real_texts():
    rows = read_jsonl(EVAL_PATH)[:150]
    texts = (
        [r["text"][:MAX_CHARS] for r in rows]  # what the domain classifier embeds, in batches of mixed lengths
        + [r["text"] for r in rows[:20]]  # whole pages
        + [url_words(r["url"]) or "none" for r in rows]
        + ["", " ", "a", "日本語のテキストです。", "Ünïcödé " * 600]
    )
    ours = embed(texts)
    with np.errstate(invalid="ignore"):  # wordllama divides 0 by 0 for the empty text
        theirs = np.asarray(static_embedder().embed(texts, norm=True), dtype=np.float32)
    assert ours.dtype == np.float32 and ours.shape == (len(texts), 256)
    assert np.array_equal(ours, theirs, equal_nan=True)
    finite = ~np.isnan(ours).any(axis=1)
    assert finite.sum() == len(texts) - 1  # only the empty text has no vector
    np.testing.assert_allclose(np.linalg.norm(ours[finite], axis=1), 1.0, rtol=1e-5)


def test_embed_of_nothing_is_an_empty_matrix():
    assert embed([]).shape == (0, 256)
