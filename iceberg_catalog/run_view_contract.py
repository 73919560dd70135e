"""The run view contract, shared by the pipeline that writes run views and the loader that reads them.

One definition each of: the manifest format name, its canonical JSON and sha256, the run view id, the Iceberg
tag that pins a published view, the samples digest, the statuses and the token dtypes. Dagster-free.

The manifest holds everything that defines what a training run reads (pinned input snapshots, tokenizer,
mixture requested and realised, seed, epoch policy, packing, the samples digest, exclusions and the
quarantine report, code and config hashes) and nothing that varies between two builds of the same thing
(no timestamps, no Dagster run ids, no snapshot id of the samples table). Identical inputs and config
therefore give the same bytes, the same sha256 and the same run view id; any change gives a new id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping

import numpy as np
import pyarrow as pa

FORMAT = "tokenlake.run_view/1"
TAG_PREFIX = "runview-"
STATUSES = ("candidate", "published", "rejected", "superseded")
# stored token arrays are little-endian; the name is recorded per tokenizer and per row
TOKEN_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
SAMPLE_DIGEST_COLUMNS = ("sample_index", "doc_id", "repetition", "n_tokens", "tokens_sha256")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def canonical_json(manifest: Mapping[str, object]) -> str:
    """The exact text that is stored and hashed: sorted keys, no whitespace, UTF-8."""
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def manifest_sha256(manifest: Mapping[str, object]) -> str:
    return hashlib.sha256(canonical_json(manifest).encode()).hexdigest()


def check_name(name: str) -> str:
    """A run view name becomes part of an id, a tag name and a partition value: keep it plain."""
    if not _NAME.match(name):
        raise ValueError(f"run view name {name!r} must match {_NAME.pattern} (lower case, digits, . _ -)")
    return name


def run_view_id(name: str, sha256: str) -> str:
    """`<name>-<first 12 hex digits of the manifest hash>`: readable, and new whenever anything changes."""
    return f"{check_name(name)}-{sha256[:12]}"


def tag_name(run_view_id: str) -> str:
    """The Iceberg tag that keeps a published view's pinned snapshots readable by time travel."""
    return f"{TAG_PREFIX}{run_view_id}"


def samples_digest(rows: Iterable[Mapping[str, object]] | pa.Table) -> str:
    """sha256 over the samples in sample_index order: one line `index, doc_id, repetition, n_tokens,
    tokens_sha256` per sample (the digest the manifest freezes and the loader verifies)."""
    if isinstance(rows, pa.Table):
        vectorised = _samples_digest_arrow(rows)
        if vectorised is not None:
            return vectorised
        cols = [rows.column(c).to_pylist() for c in SAMPLE_DIGEST_COLUMNS]
        rows = (dict(zip(SAMPLE_DIGEST_COLUMNS, values, strict=True)) for values in zip(*cols, strict=True))
    h = hashlib.sha256()
    for r in rows:
        h.update(
            f"{r['sample_index']}\t{r['doc_id']}\t{r['repetition']}\t{r['n_tokens']}\t{r['tokens_sha256']}\n".encode()
        )
    return h.hexdigest()


def _samples_digest_arrow(table: pa.Table) -> str | None:
    """`samples_digest` of a table without nulls, its lines built by Arrow and hashed in one call (the same bytes:
    integers cast to strings print as str(int)); None when a column has nulls (the per-row path spells them)."""
    import pyarrow.compute as pc

    cols = [table.column(c) for c in SAMPLE_DIGEST_COLUMNS]
    if table.num_rows == 0 or any(c.null_count for c in cols):
        return None
    parts = [c.cast(pa.large_string()) for c in cols]
    tab = pa.scalar("\t", pa.large_string())
    lines = pc.binary_join_element_wise(*parts, tab)
    lines = pc.binary_join_element_wise(lines, pa.scalar("", pa.large_string()), pa.scalar("\n", pa.large_string()))
    h = hashlib.sha256()
    for chunk in lines.chunks:
        offsets = np.frombuffer(chunk.buffers()[1], dtype="<i8", count=len(chunk) + 1, offset=chunk.offset * 8)
        if len(chunk):
            h.update(memoryview(chunk.buffers()[2])[int(offsets[0]) : int(offsets[-1])])
    return h.hexdigest()


def token_dtype(name: str) -> np.dtype:
    """The numpy dtype of a stored token dtype name, with a clear error for anything else."""
    if name not in TOKEN_DTYPES:
        raise ValueError(f"token_dtype must be one of {sorted(TOKEN_DTYPES)}, got {name!r}")
    return TOKEN_DTYPES[name]


def token_dtype_for_vocab(vocab_size: int) -> str:
    """The narrowest stored dtype that holds every id of a vocabulary."""
    if vocab_size <= 1 << 16:
        return "uint16"
    if vocab_size <= 1 << 32:
        return "uint32"
    raise ValueError(f"vocabulary of {vocab_size} ids does not fit uint32")
