"""Tokenizers as data and documents as token arrays: load a tokenizer.json with its id, encode with EOS,
checksum, decode and check stored rows. No Dagster here (README.md: ids, special tokens, storage)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from iceberg_catalog.run_view_contract import token_dtype, token_dtype_for_vocab

EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>")
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<|startoftext|>", "<bos>")


def canonical_tokenizer_json(raw: str) -> str:
    """tokenizer.json with sorted keys and no insignificant whitespace."""
    return json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tokenizer_id(raw: str) -> str:
    """sha256 (hex) of the canonical tokenizer.json."""
    return hashlib.sha256(canonical_tokenizer_json(raw).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenizerInfo:
    tokenizer_id: str
    name: str
    vocab_size: int
    eos_id: int
    bos_id: int | None
    token_dtype: str  # a name of run_view_contract.TOKEN_DTYPES


def _special_id(tok: Tokenizer, candidates: Sequence[str]) -> int | None:
    for token in candidates:
        tid = tok.token_to_id(token)
        if tid is not None:
            return tid
    return None


@dataclass
class LoadedTokenizer:
    tokenizer: Tokenizer
    info: TokenizerInfo
    json_text: str

    @property
    def dtype(self) -> np.dtype:
        return token_dtype(self.info.token_dtype)


def load_tokenizer(path: str | Path, name: str, eos_token: str | None = None) -> LoadedTokenizer:
    """Load a tokenizer.json from disk (never from a hub) with its id, EOS/BOS ids and token width; loaded once
    per process for an unchanged file (parsing and canonicalising a 3.5 MB JSON costs ~0.5 s)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"tokenizer {name!r}: {str(p)!r} is not a file (give a local tokenizer.json path)")
    stat = p.stat()
    return _load_cached(str(p.resolve()), stat.st_mtime_ns, stat.st_size, name, eos_token)


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int, name: str, eos_token: str | None) -> LoadedTokenizer:
    return tokenizer_from_json(Path(path).read_text(encoding="utf-8"), name, eos_token)


def tokenizer_from_json(
    raw: str, name: str, eos_token: str | None = None, known_id: str | None = None
) -> LoadedTokenizer:
    """A tokenizer from its tokenizer.json text (e.g. as stored in tokenized.tokenizers, whose `known_id` then
    spares recomputing the canonical hash)."""
    tok = Tokenizer.from_str(raw)
    tok.encode_special_tokens = True
    eos = tok.token_to_id(eos_token) if eos_token else _special_id(tok, EOS_CANDIDATES)
    if eos is None:
        raise ValueError(f"tokenizer {name!r} has no EOS token among {EOS_CANDIDATES}; pass eos_token=...")
    vocab = tok.get_vocab_size(with_added_tokens=True)
    info = TokenizerInfo(
        known_id or tokenizer_id(raw), name, vocab, eos, _special_id(tok, BOS_CANDIDATES), token_dtype_for_vocab(vocab)
    )
    return LoadedTokenizer(tok, info, raw)


def encode_documents(lt: LoadedTokenizer, texts: Sequence[str]) -> list[np.ndarray]:
    """Token ids of each text followed by EOS, in the tokenizer's storage dtype."""
    encodings = lt.tokenizer.encode_batch(list(texts), add_special_tokens=False)
    eos = np.array([lt.info.eos_id], dtype=lt.dtype)
    return [np.concatenate([np.asarray(e.ids, dtype=lt.dtype), eos]) for e in encodings]


def tokens_checksum(data: bytes) -> str:
    """sha256 (hex) of the stored token bytes."""
    return hashlib.sha256(data).hexdigest()


def tokens_from_bytes(data: bytes, token_dtype_name: str) -> np.ndarray:
    """The token ids of stored bytes (a zero-copy view)."""
    return np.frombuffer(data, dtype=token_dtype(token_dtype_name))


def decode_document(lt: LoadedTokenizer, tokens: np.ndarray) -> str:
    """The text of a stored token array (its trailing EOS removed)."""
    ids = tokens[:-1] if len(tokens) and tokens[-1] == lt.info.eos_id else tokens
    return lt.tokenizer.decode(ids.tolist(), skip_special_tokens=False)


def check_rows(
    rows: Sequence[dict], lt: LoadedTokenizer | None = None, texts: dict[str, str] | None = None
) -> list[dict]:
    """Problems in stored rows: checksum or count mismatches, a missing final EOS, and, where `texts` gives the
    source text of a doc_id, a decode that differs from it. Each problem names the doc_id."""
    problems = []
    for r in rows:
        data = r["tokens"]
        if tokens_checksum(data) != r["tokens_sha256"]:
            problems.append({"doc_id": r["doc_id"], "problem": "checksum mismatch"})
            continue
        try:
            toks = tokens_from_bytes(data, r["token_dtype"])
        except ValueError as exc:
            problems.append({"doc_id": r["doc_id"], "problem": str(exc)})
            continue
        if len(toks) != r["n_tokens"]:
            problems.append({"doc_id": r["doc_id"], "problem": f"n_tokens {r['n_tokens']} != {len(toks)} stored"})
        elif lt is not None and (not len(toks) or toks[-1] != lt.info.eos_id):
            problems.append({"doc_id": r["doc_id"], "problem": "does not end with EOS"})
        elif (
            lt is not None
            and texts is not None
            and r["doc_id"] in texts
            and decode_document(lt, toks) != texts[r["doc_id"]]
        ):
            problems.append({"doc_id": r["doc_id"], "problem": "decoded tokens differ from the curated text"})
    return problems


def tokenizer_row(lt: LoadedTokenizer) -> pa.Table:
    """The tokenizer as its one row of tokenized.tokenizers (the exact tokenizer.json included)."""
    info = lt.info
    return pa.table(
        {
            "tokenizer_id": [info.tokenizer_id],
            "name": [info.name],
            "vocab_size": [info.vocab_size],
            "eos_id": [info.eos_id],
            "bos_id": pa.array([info.bos_id], pa.int32()),
            "token_dtype": [info.token_dtype],
            "tokenizer_json": [lt.json_text],
        }
    )
