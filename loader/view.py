"""Opening a published run view: from the lakehouse by id, or from an exported bundle (no catalog needed).

The run view contract (manifest format and hash, tag name, samples digest, token dtypes) is
`iceberg_catalog.run_view_contract`, shared with the pipeline that writes the views. Reading and checking a view
in the catalog is `loader.catalog` (the steps are listed there), a bundle `loader.bundles`; either gives the same
`Published` record, served here as a `RunView` whose token reader (`loader.sources.RowGroupSource`) reads whole
row groups on demand and verifies tokens_sha256 of every document it decodes, raising ChecksumMismatch with the
doc_id. The order's block ids come from the layout: one block per (repetition, file, row group), files sorted by
path.

`in_memory_view` builds a view over token arrays held in memory (tests, notebooks); it is never "published"
in a lakehouse but behaves identically for order, packing, state and audit.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from iceberg_catalog import arrays
from iceberg_catalog import run_view_contract as contract
from iceberg_catalog.run_view_contract import TOKENS_TABLE, Manifest
from loader.bundles import read_bundle
from loader.catalog import SAMPLE_COLUMNS, Published, published_from_catalog
from loader.order import chunk_blocks
from loader.sources import DEFAULT_CACHED_ROW_GROUPS, InMemorySource, RowGroupSource, TokenSource

if TYPE_CHECKING:  # a training process reading an embedded catalog never imports pyiceberg (`loader.catalog`)
    from pyiceberg.catalog import Catalog

    from iceberg_catalog.lakehouse import Lakehouse


@dataclass
class RunView:
    """A published run view ready to serve: manifest, samples (sample_index order), block ids, token source."""

    run_view_id: str
    status: str
    manifest: Manifest
    manifest_sha256: str
    samples: pa.Table
    block_ids: np.ndarray
    source: TokenSource
    origin: str = "catalog"  # catalog | bundle | memory

    def __post_init__(self) -> None:
        self.n_tokens = arrays.to_numpy(self.samples.column("n_tokens")).astype(np.int64)
        self.doc_ids: list[str] = self.samples.column("doc_id").to_pylist()

    @property
    def n_samples(self) -> int:
        return self.samples.num_rows

    @property
    def tokenizer_id(self) -> str:
        return self.manifest.tokenizer_id

    @property
    def seed(self) -> int:
        return int(self.manifest.seed)

    @property
    def packing(self) -> dict:
        return dict(self.manifest.packing)

    @property
    def epochs(self) -> int | None:
        return self.manifest.epochs

    @property
    def tokens_per_epoch(self) -> int:
        return int(self.n_tokens.sum())


def layout_block_ids(repetition: np.ndarray, file_index: np.ndarray, row_group: np.ndarray) -> np.ndarray:
    """One block per (repetition, file, row group), numbered in that sort order."""
    rep, fi, rg = (np.asarray(a, np.int64) for a in (repetition, file_index, row_group))
    if not len(rep):
        return np.zeros(0, np.int64)
    n_fi, n_rg = int(fi.max()) + 1, int(rg.max()) + 1
    key = (rep * n_fi + fi) * n_rg + rg  # the same order as sorting the triples, as one integer (10x faster)
    _, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def view_from_published(
    published: Published, origin: str, max_cached_row_groups: int = DEFAULT_CACHED_ROW_GROUPS, storage=None
) -> RunView:
    """The servable view of a published one: its samples' layout gives the token reader and the block ids."""
    samples, manifest = published.samples, published.manifest
    fi = arrays.to_numpy(samples.column("file_index")).astype(np.int64)
    rg = arrays.to_numpy(samples.column("row_group")).astype(np.int64)
    row = arrays.to_numpy(samples.column("row")).astype(np.int64)
    source = RowGroupSource(
        tuple(published.files),
        fi,
        rg,
        row,
        samples.column("doc_id").to_pylist(),
        samples.column("tokens_sha256").to_pylist(),
        dict(published.io_properties),
        max_cached=max_cached_row_groups,
        run_view_id=published.run_view_id,
        token_dtype=manifest.token_dtype,
        storage=storage,
        group_sha256=None if published.layout is None else published.layout.group_digests(),
    )
    blocks = layout_block_ids(arrays.to_numpy(samples.column("repetition")), fi, rg)
    return RunView(
        published.run_view_id,
        published.status,
        manifest,
        published.manifest_sha256,
        samples.select(SAMPLE_COLUMNS),
        blocks,
        source,
        origin,
    )


def open_run_view(
    run_view_id: str | None = None,
    *,
    catalog: Lakehouse | Catalog | None = None,
    bundle: str | Path | None = None,
    io_properties: Mapping[str, str] | None = None,
    max_cached_row_groups: int = DEFAULT_CACHED_ROW_GROUPS,
    storage=None,
) -> RunView:
    """Open a published run view by id from the lakehouse (`catalog`: a `Lakehouse`, a pyiceberg catalog, or
    None for the configured one), or from an exported bundle directory; refuses candidate, rejected and
    superseded views with named errors. `storage` (loader.storage.StorageConfig): timeouts, retries and the
    node-local cache for token objects on object storage."""
    if bundle is not None:
        published = read_bundle(Path(bundle), run_view_id, io_properties or {})
        return view_from_published(published, "bundle", max_cached_row_groups, storage)
    if not run_view_id:
        raise ValueError("give a run_view_id (catalog) or bundle=<exported directory>")
    published = published_from_catalog(catalog, run_view_id)
    if io_properties:
        published = dataclasses.replace(published, io_properties={**published.io_properties, **io_properties})
    return view_from_published(published, "catalog", max_cached_row_groups, storage)


# --- in memory --------------------------------------------------------------------------------------------


def in_memory_view(
    docs: Sequence[np.ndarray],
    *,
    seq_len: int,
    eos_id: int,
    seed: int = 0,
    cross_document_attention: str = "masked",
    tokenizer_id: str = "in-memory",
    token_dtype: str = "uint16",
    epochs: int | None = None,
    block_size: int = 16,
    doc_ids: Sequence[str] | None = None,
    name: str = "memory",
) -> RunView:
    """A published-like view over token arrays in memory (each should end with `eos_id`); doc ids default to
    doc-<i>, and the manifest follows the run view contract so state and audit work unchanged."""
    dtype = contract.token_dtype(token_dtype)
    data = [np.asarray(d, dtype=dtype).tobytes() for d in docs]
    ids = list(doc_ids) if doc_ids is not None else [f"doc-{i:06d}" for i in range(len(docs))]
    if len(set(ids)) != len(ids):
        raise ValueError(
            "in_memory_view: doc_ids must be unique (repeat a document by listing it twice with different ids)"
        )
    shas = [hashlib.sha256(b).hexdigest() for b in data]
    n = pa.array([len(d) for d in docs], pa.int32())
    samples = pa.table(
        {
            "sample_index": pa.array(range(len(docs)), pa.int64()),
            "doc_id": ids,
            "tokenizer_id": [tokenizer_id] * len(ids),
            "crawl": ["memory"] * len(ids),
            "segment": ["0"] * len(ids),
            "component": ["all"] * len(ids),
            "repetition": pa.array([0] * len(ids), pa.int32()),
            "n_tokens": n,
            "tokens_sha256": shas,
        }
    )
    manifest = {
        "format": contract.FORMAT,
        "name": name,
        "tokenizer": {
            "tokenizer_id": tokenizer_id,
            "name": tokenizer_id,
            "vocab_size": None,
            "eos_id": eos_id,
            "token_dtype": token_dtype,
        },
        "inputs": {TOKENS_TABLE: None},
        "seed": seed,
        "epoch_policy": {"epochs": epochs, "shuffle": "block"},
        "packing": {"seq_len": seq_len, "eos_id": eos_id, "cross_document_attention": cross_document_attention},
        "samples": {
            "n_samples": len(ids),
            "n_tokens": int(sum(len(d) for d in docs)),
            "sha256": contract.samples_digest(samples),
        },
    }
    frozen = Manifest.from_dict(manifest)
    source = InMemorySource(dict(zip(ids, data, strict=True)), ids, shas, token_dtype)
    return RunView(
        contract.run_view_id(name, frozen.sha256),
        "published",
        frozen,
        frozen.sha256,
        samples,
        chunk_blocks(len(ids), block_size),
        source,
        "memory",
    )
