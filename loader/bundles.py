"""Run view bundles: a published view exported to a directory, opened on a cluster without catalog access.

A bundle (`export_run_view` -> directory; `loader.open_run_view(bundle=dir)`) holds manifest.json (the exact hashed
bytes), run_view.json (id, status at export, token files), samples.parquet (samples plus their layout) and, when the
view was published with one, layout.bin (its row-group digests), so a cluster reads the same Parquet token files
(local, or S3 through pyiceberg's FileIO with `io_properties`) in the same order. Only a published view is exported;
the bundle cannot learn of a later supersession, so the export records its time and status.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq

from iceberg_catalog.run_view_contract import TOKENS_TABLE
from loader.catalog import Published, check_samples, check_status, parse_manifest, published_from_catalog, read_layout
from loader.errors import ManifestIntegrityError, RunViewNotFound

if TYPE_CHECKING:  # a training process reading a bundle never imports pyiceberg
    from pyiceberg.catalog import Catalog

    from iceberg_catalog.lakehouse import Lakehouse

BUNDLE_FORMAT = "tokenlake.run_view_bundle/1"
log = logging.getLogger(__name__)


def export_run_view(run_view_id: str, out_dir: str | Path, *, catalog: Lakehouse | Catalog | None = None) -> Path:
    """Write a published view's bundle (manifest.json, run_view.json, samples.parquet) to `out_dir` for a
    cluster without catalog access; returns the directory."""
    view = published_from_catalog(catalog, run_view_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_bytes(view.manifest_json.encode("utf-8"))
    pq.write_table(view.samples, out / "samples.parquet")
    layout_sha = None
    if view.layout is not None:  # the published row-group digests travel with the bundle
        blob = view.layout.encode()
        (out / "layout.bin").write_bytes(blob)
        layout_sha = hashlib.sha256(blob).hexdigest()
    (out / "run_view.json").write_text(
        json.dumps(
            {
                "format": BUNDLE_FORMAT,
                "run_view_id": run_view_id,
                "status": view.status,
                "manifest_sha256": view.manifest_sha256,
                "token_files": view.files,
                "tokens_snapshot_id": view.manifest.inputs.get(TOKENS_TABLE),
                "layout_sha256": layout_sha,
                "exported_at": dt.datetime.now(dt.UTC).isoformat(),
            },
            indent=1,
            sort_keys=True,
        )
    )
    return out


def read_bundle(path: Path, run_view_id: str | None, io_properties: Mapping[str, str]) -> Published:
    """The published view a bundle holds, checked like one read from the catalog (status at export, manifest
    hash, samples digest); its layout only where samples.parquet's rows are the published ones."""
    meta_path = path / "run_view.json"
    if not meta_path.is_file():
        raise RunViewNotFound(
            f"{str(path)!r} is not a run view bundle (no run_view.json); create one with loader.export_run_view"
        )
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != BUNDLE_FORMAT:
        raise ManifestIntegrityError(
            f"bundle {str(path)!r} has format {meta.get('format')!r}, expected {BUNDLE_FORMAT}"
        )
    rid = meta["run_view_id"]
    if run_view_id is not None and run_view_id != rid:
        raise RunViewNotFound(f"bundle {str(path)!r} holds run view {rid}, not {run_view_id}")
    check_status(rid, meta["status"])
    manifest_json = (path / "manifest.json").read_bytes().decode("utf-8")
    manifest = parse_manifest(manifest_json, meta["manifest_sha256"], rid)
    samples = pq.read_table(path / "samples.parquet")
    check_samples(rid, manifest, samples)
    layout = None
    if meta.get("layout_sha256") and (path / "layout.bin").is_file():
        blob = (path / "layout.bin").read_bytes()
        layout = read_layout(blob, meta["layout_sha256"], rid, manifest, samples.num_rows, str(path / "layout.bin"))
        # the digests vouch for whole row groups, so the rows they are used for must be the published ones
        same = layout is not None and list(layout.files) == list(meta["token_files"])
        for name in ("file_index", "row_group", "row") if same else ():
            same = same and np.array_equal(samples.column(name).to_numpy(), getattr(layout, name))
        if not same and layout is not None:
            log.warning("bundle %s: samples.parquet's layout differs from layout.bin; checksumming per document", path)
        layout = layout if same else None
    return Published(
        rid,
        meta["status"],
        manifest,
        manifest_json,
        meta["manifest_sha256"],
        samples,
        meta["token_files"],
        dict(io_properties),
        layout,
    )
