"""The shared test view's token files copied to a real S3 server (SeaweedFS on loopback), as bundles whose
token_files are s3:// objects: a faithful one and one whose object has a corrupted token."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.loader import views


def upload_bundle(
    sw, out: Path, *, corrupt_doc_row: int | None = None, endpoint: str | None = None
) -> tuple[Path, dict]:
    """A copy of the shared bundle whose token files live under a fresh s3://bucket/prefix; with `corrupt_doc_row`
    the first file's document at that row has one token changed (its recorded checksum kept). Returns (bundle,
    io_properties); `endpoint` overrides the S3 endpoint (a proxy in front of the server)."""
    client = sw.client()
    prefix = f"loader-{uuid.uuid4().hex[:8]}"
    bundle = out / f"bundle-{prefix}"
    shutil.copytree(views.bundle(), bundle)
    meta = json.loads((bundle / "run_view.json").read_text())
    urls = []
    for i, f in enumerate(meta["token_files"]):
        local = Path(f.removeprefix("file://"))
        if i == 0 and corrupt_doc_row is not None:
            table = pq.read_table(local)
            tokens = table.column("tokens").to_pylist()
            r = corrupt_doc_row
            tokens[r] = bytes([tokens[r][0] ^ 1]) + tokens[r][1:]
            table = table.set_column(
                table.schema.get_field_index("tokens"), "tokens", pa.array(tokens, pa.large_binary())
            )
            local = out / f"{prefix}-corrupt.parquet"
            pq.write_table(
                table, local, row_group_size=pq.ParquetFile(f.removeprefix("file://")).metadata.row_group(0).num_rows
            )
        key = f"{prefix}/tokens-{i:03d}.parquet"
        client.upload_file(str(local), sw.bucket, key)
        urls.append(f"s3://{sw.bucket}/{key}")
    meta["token_files"] = urls
    (bundle / "run_view.json").write_text(json.dumps(meta))
    props = sw.s3_properties()
    if endpoint:
        props["s3.endpoint"] = endpoint
    return bundle, props
