"""Pure tokenization helpers with the real tokenizers shipped in data/tokenizers/."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assets.tokenized.tokens import (
    check_rows,
    decode_document,
    encode_documents,
    load_tokenizer,
    tokenizer_id,
    tokenizer_row,
    tokens_checksum,
)
from iceberg_catalog.run_view_contract import token_dtype_for_vocab
from iceberg_catalog.schemas import TOKENIZED_TOKENIZERS
from resources import DEFAULT_TOKENIZERS

GPT2 = load_tokenizer(DEFAULT_TOKENIZERS["gpt2"], "gpt2")
CL100K = load_tokenizer(DEFAULT_TOKENIZERS["olmo2-cl100k"], "olmo2-cl100k")


def test_tokenizer_facts():
    assert (GPT2.info.vocab_size, GPT2.info.eos_id, GPT2.info.token_dtype) == (50257, 50256, "uint16")
    assert (CL100K.info.vocab_size, CL100K.info.eos_id, CL100K.info.token_dtype) == (100278, 100257, "uint32")
    assert GPT2.info.tokenizer_id != CL100K.info.tokenizer_id


def test_id_is_the_canonical_json_hash():
    raw = GPT2.json_text
    reformatted = json.dumps(json.loads(raw), indent=4)  # same tokenizer, other formatting
    assert tokenizer_id(reformatted) == tokenizer_id(raw) == GPT2.info.tokenizer_id
    assert token_dtype_for_vocab(65536) == "uint16" and token_dtype_for_vocab(65537) == "uint32"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=200), min_size=1, max_size=5))
def test_encode_appends_eos_and_round_trips(texts):
    for lt in (GPT2, CL100K):
        for text, tokens in zip(texts, encode_documents(lt, texts)):
            assert tokens.dtype == lt.dtype and tokens[-1] == lt.info.eos_id
            assert decode_document(lt, tokens) == text


def test_special_token_strings_in_text_are_plain_text():
    (tokens,) = encode_documents(GPT2, ["a page quoting <|endoftext|> in its text"])
    assert list(tokens).count(GPT2.info.eos_id) == 1  # only the appended one


def test_check_rows_names_the_bad_document():
    arrays = encode_documents(GPT2, ["first document.", "second document."])
    rows = [
        {
            "doc_id": f"d{i}",
            "tokens": a.tobytes(),
            "tokens_sha256": tokens_checksum(a.tobytes()),
            "token_dtype": "uint16",
            "n_tokens": len(a),
        }
        for i, a in enumerate(arrays)
    ]
    texts = {"d0": "first document.", "d1": "second document."}
    assert check_rows(rows, GPT2, texts) == []
    bad = bytearray(rows[1]["tokens"])
    bad[0] ^= 0xFF
    rows[1] = {**rows[1], "tokens": bytes(bad)}
    assert check_rows(rows, GPT2, texts) == [{"doc_id": "d1", "problem": "checksum mismatch"}]
    # a consistent checksum over wrong tokens is caught by decoding
    rows[1] = {**rows[1], "tokens_sha256": tokens_checksum(bytes(bad))}
    assert check_rows(rows, GPT2, texts)[0]["doc_id"] == "d1"


def test_a_corrupted_token_dtype_is_a_problem_not_a_crash():
    (a,) = encode_documents(GPT2, ["a document."])
    row = {
        "doc_id": "d0",
        "tokens": a.tobytes(),
        "tokens_sha256": tokens_checksum(a.tobytes()),
        "token_dtype": "int8",
        "n_tokens": len(a),
    }
    [problem] = check_rows([row], GPT2)
    assert problem["doc_id"] == "d0" and "int8" in problem["problem"]


def test_the_tokenizer_row_fits_its_table():
    row = tokenizer_row(GPT2)
    assert row.cast(TOKENIZED_TOKENIZERS.arrow_schema).to_pylist() == [
        {
            "tokenizer_id": GPT2.info.tokenizer_id,
            "name": "gpt2",
            "vocab_size": 50257,
            "eos_id": 50256,
            "bos_id": None,
            "token_dtype": "uint16",
            "tokenizer_json": GPT2.json_text,
        }
    ]


def test_missing_tokenizer_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a file"):
        load_tokenizer(tmp_path / "nope.json", "x")


def test_uint32_storage_for_large_vocabularies():
    (tokens,) = encode_documents(CL100K, ["hello"])
    assert np.frombuffer(tokens.tobytes(), "<u4")[-1] == 100257
