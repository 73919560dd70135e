"""A published view's layout (iceberg_catalog.run_view_contract.ViewLayout), written at publication.

Where every sample's document lies in the token files the manifest pins (file, row group, row), and per row group
the view reads one sha256 over its token values: a loader opening the view then reads neither the doc_id columns
of every row group (start-up) nor checksums documents one by one (one sha256 call per row group instead of one
per ~250-token document). Each row group's digest is computed here from bytes whose documents were first checked,
one by one, against the samples' tokens_sha256 (a row group with a document that does not verify gets no digest:
the loader then reads it document by document and names the bad one). Files are located exactly as the loader's
fallback does (`contract.locate_documents` over the files planned with the same filter, sorted by path).

The blob lies under run_view.samples' location (`layouts/<id>-<sha16>.layout`), its sha256 and path in the table
property `contract.layout_property(id)`; not in the manifest (see the contract module): the run view id and
the samples digest do not change. Views published before have no layout and open the way they always did.
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import And, EqualTo, In

from iceberg_catalog import Lakehouse
from iceberg_catalog import run_view_contract as contract
from iceberg_catalog.schemas import RUN_VIEW_SAMPLES, TOKENIZED_DOCUMENTS
from iceberg_catalog.transaction import transaction

log = logging.getLogger(__name__)


def token_files(lakehouse: Lakehouse, manifest: contract.Manifest, samples: pa.Table):
    """(the tokenized.documents table, the view's token file paths sorted, whether any has delete files), planned
    at the manifest's pinned snapshot with the loader's filter (tokenizer, the samples' segments)."""
    table = lakehouse.table(TOKENIZED_DOCUMENTS)
    snapshot_id = manifest.inputs.get(TOKENIZED_DOCUMENTS.identifier)
    segments = sorted(set(samples.column("segment").to_pylist()))
    where = EqualTo("tokenizer_id", manifest.tokenizer_id)
    if segments:
        where = And(where, In("segment", segments))
    tasks = list(table.scan(row_filter=where, snapshot_id=int(snapshot_id)).plan_files())
    return table, sorted({t.file.file_path for t in tasks}), any(t.delete_files for t in tasks)


def build_layout(lakehouse: Lakehouse, manifest: contract.Manifest, samples: pa.Table) -> contract.ViewLayout | None:
    """The view's layout, or None when it cannot have one (no pinned token snapshot, delete files, a document
    missing: the loader's own path reports those)."""
    if manifest.inputs.get(TOKENIZED_DOCUMENTS.identifier) is None or samples.num_rows == 0:
        return None
    table, files, deletes = token_files(lakehouse, manifest, samples)
    if deletes:
        return None
    opened = []
    for path in files:
        f = table.io.new_input(path).open()
        pf = pq.ParquetFile(f, pre_buffer=False)
        counts = np.array([pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)], np.int64)
        opened.append((f, pf, pf.read(columns=["doc_id"], use_threads=False).column(0), counts))
    try:
        fi, rg, row, missing = contract.locate_documents(samples.column("doc_id"), [(c, n) for _, _, c, n in opened])
        if missing:
            log.warning("run view layout not written: %d documents not in the token files", len(missing))
            return None
        want = np.frombuffer(bytes.fromhex("".join(samples.column("tokens_sha256").to_pylist())), "S32")
        key = (fi.astype(np.int64) << 32) | rg.astype(np.int64)
        order = np.argsort(key, kind="stable")
        groups, first = np.unique(key[order], return_index=True)
        bounds = np.append(first, len(order))
        g_file, g_rg, g_sha = [], [], []
        for j, k in enumerate(groups.tolist()):
            at = order[bounds[j] : bounds[j + 1]]
            pf = opened[k >> 32][1]
            col = pf.read_row_group(k & 0xFFFFFFFF, columns=["tokens"], use_threads=False).column(0)
            data, starts = contract.token_value_bytes(col.combine_chunks())
            rows = row[at].astype(np.int64)
            got = b"".join(hashlib.sha256(data[a:b]).digest() for a, b in zip(starts[rows], starts[rows + 1]))
            if got != want[at].tobytes():
                log.warning("row group %d of %s: a document differs from its checksum", k & 0xFFFFFFFF, files[k >> 32])
                continue
            g_file.append(k >> 32)
            g_rg.append(k & 0xFFFFFFFF)
            g_sha.append(contract.row_group_digest(data))
    finally:
        for f, *_ in opened:
            f.close()
    return contract.ViewLayout(
        manifest_sha256=manifest.sha256,
        samples_sha256=manifest.samples_sha256,
        files=files,
        file_index=fi,
        row_group=rg,
        row=row,
        group_file=g_file,
        group_row_group=g_rg,
        group_sha256=np.array(g_sha, "S32"),
    )


def publish_layout(
    lakehouse: Lakehouse, run_view_id: str, manifest: contract.Manifest, samples: pa.Table
) -> str | None:
    """Write the view's layout blob and point run_view.samples' property at it (idempotent); its path, or None
    when the view has no layout."""
    prop = contract.layout_property(run_view_id)
    table = lakehouse.table(RUN_VIEW_SAMPLES)
    if prop in table.properties:
        return table.properties[prop].split(" ", 1)[1]
    layout = build_layout(lakehouse, manifest, samples)
    if layout is None:
        return None
    blob = layout.encode()
    sha = hashlib.sha256(blob).hexdigest()
    path = f"{table.location().rstrip('/')}/layouts/{run_view_id}-{sha[:16]}.layout"
    with table.io.new_output(path).create(overwrite=True) as out:
        out.write(blob)
    with lakehouse.commit_lock(RUN_VIEW_SAMPLES):
        table = lakehouse.table(RUN_VIEW_SAMPLES)
        if prop not in table.properties:
            with transaction(table) as tx:
                tx.set_properties({prop: f"{sha} {path}"})
    return path
