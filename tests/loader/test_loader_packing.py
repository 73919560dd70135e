"""Packing invariants (hypothesis, real GPT-2 tokens and arbitrary ones): cu_seqlens, position ids, labels never
crossing a document under "masked", padding masked, unpack gives back the documents."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.packing import IGNORE_INDEX, pack_documents, pack_sequence, unpack
from tests.loader.views import gpt2_docs

EOS = 50256


def docs_strategy():
    body = st.lists(st.integers(0, EOS - 1), min_size=0, max_size=70)
    return st.lists(body.map(lambda t: np.array([*t, EOS], dtype=np.uint16)), min_size=1, max_size=12)


def check_invariants(docs, seq_len, policy, extra_padding=0):
    n_real = -(-sum(len(d) for d in docs) // seq_len)
    packed = pack_documents(docs, seq_len, EOS, policy, n_sequences=n_real + extra_padding)
    stream = np.concatenate(docs).astype(np.int64)
    owner = np.concatenate([np.full(len(d), i) for i, d in enumerate(docs)])
    for i, (seq, pieces) in enumerate(packed):
        cu = seq.cu_seqlens
        assert cu[0] == 0 and cu[-1] == seq_len and np.all(np.diff(cu) > 0)
        # position ids restart at every segment boundary and count up inside it
        for a, b in zip(cu[:-1], cu[1:]):
            assert np.array_equal(seq.position_ids[a:b], np.arange(b - a))
        n = sum(b - a for _, a, b in pieces)
        assert np.array_equal(seq.input_ids[:n], stream[i * seq_len : i * seq_len + n])
        # padding: pad id, ignored label, no loss, segment -1
        assert np.all(seq.input_ids[n:] == EOS) and np.all(seq.labels[n:] == IGNORE_INDEX)
        assert np.all(seq.loss_mask[n:] == 0) and np.all(seq.segment_ids[n:] == -1)
        assert np.array_equal(seq.loss_mask, (seq.labels != IGNORE_INDEX).astype(np.int64))
        for t in range(n):
            g = i * seq_len + t  # stream position
            if g + 1 >= len(stream):
                assert seq.labels[t] == IGNORE_INDEX
            elif owner[g + 1] != owner[g]:  # the label would be another document's token
                assert seq.labels[t] == (IGNORE_INDEX if policy == "masked" else stream[g + 1])
            else:
                assert seq.labels[t] == stream[g + 1]
    back = unpack([(seq.input_ids, pieces) for seq, pieces in packed])
    assert sorted(back) == list(range(len(docs)))
    for p, d in enumerate(docs):
        assert np.array_equal(back[p], d.astype(np.int64))


@given(
    docs=docs_strategy(),
    seq_len=st.integers(2, 50),
    policy=st.sampled_from(["masked", "allowed"]),
    extra=st.integers(0, 2),
)
def test_packing_invariants_hold_for_any_documents(docs, seq_len, policy, extra):
    check_invariants(docs, seq_len, policy, extra)


@pytest.mark.parametrize("seq_len", [16, 64, 257])
@pytest.mark.parametrize("policy", ["masked", "allowed"])
def test_packing_invariants_on_real_gpt2_documents(seq_len, policy):
    check_invariants(list(gpt2_docs()), seq_len, policy, extra_padding=1)


def test_masked_vs_allowed_at_a_document_boundary():
    a, b = np.array([1, 2, EOS]), np.array([5, 6, EOS])
    masked = pack_sequence([a, b], [True, True], None, 8, EOS, "masked")
    allowed = pack_sequence([a, b], [True, True], None, 8, EOS, "allowed")
    assert masked.labels.tolist() == [2, EOS, -100, 6, EOS, -100, -100, -100]
    assert allowed.labels.tolist() == [2, EOS, 5, 6, EOS, -100, -100, -100]
    assert masked.cu_seqlens.tolist() == allowed.cu_seqlens.tolist() == [0, 3, 6, 8]
    assert masked.position_ids.tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    # a document cut by the sequence end: its last label is its own next token, from the next sequence
    cut = pack_sequence([np.array([1, 2, 3])], [False], 4, 3, EOS, "masked")
    assert cut.labels.tolist() == [2, 3, 4]


def test_bad_policy_is_named():
    with pytest.raises(ValueError, match="cross_document_attention"):
        pack_sequence([np.array([1, EOS])], [True], None, 4, EOS, "sometimes")
