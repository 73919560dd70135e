"""Erasure on S3 (SeaweedFS), with the catalog on PostgreSQL: row delete, snapshot expiry, the orphan sweep
listing and deleting objects, and the byte search reading objects find the value before and nowhere after."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from iceberg_catalog import CatalogConfig
from iceberg_catalog.maintenance import erase_rows, find_bytes_in_files, sweep_orphan_files
from tests.cluster.servers import postgres, seaweedfs  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

SECRET = "secret-value-4711-only-here"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "text", StringType(), required=False),
)


def test_erasure_sweep_and_byte_search_on_s3(postgres, seaweedfs):  # noqa: F811
    props = seaweedfs.sql_catalog_properties(postgres.sqlalchemy_uri, "wh-maint")
    config = CatalogConfig("maint", props)
    catalog = config.load()
    catalog.create_namespace_if_not_exists("m")
    table = catalog.create_table("m.docs", schema=SCHEMA)
    assert table.location().startswith(f"s3://{seaweedfs.bucket}/wh-maint/")
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "text": ["a", SECRET, "c"]}))
    table.append(pa.table({"id": pa.array([4], pa.int64()), "text": ["d"]}))
    root = props["warehouse"]
    needle = SECRET.encode()

    # an unreferenced object under the table: the sweep removes it (no writer running: min age 0)
    stray = f"{table.location()}/data/stray-{SECRET[:6]}.parquet"
    with table.io.new_output(stray).create() as out:
        out.write(b"not referenced")
    assert sweep_orphan_files(table, dry_run=True, uncommitted_min_age_seconds=0) == [stray]
    assert sweep_orphan_files(table, uncommitted_min_age_seconds=0, catalog_fingerprint=config.fingerprint()) == [stray]
    assert not table.io.new_input(stray).exists()

    hits = find_bytes_in_files(root, [needle], properties=props)
    assert hits and all(p.startswith(f"s3://{seaweedfs.bucket}/wh-maint/") for p, _ in hits)

    report = erase_rows(
        table, EqualTo("text", SECRET), {"tokenlake.erasure": "test"},
        catalog_fingerprint=config.fingerprint(), uncommitted_min_age_seconds=0,
    )  # fmt: skip
    assert report.rows_deleted == 1 and report.erased and report.files_removed
    assert all(f.startswith("s3://") for f in report.files_removed)
    assert find_bytes_in_files(root, [needle], properties=props) == []
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 3, 4]
    with pytest.raises(FileNotFoundError, match="holds no object"):
        find_bytes_in_files(f"s3://{seaweedfs.bucket}/nothing-here", [needle], properties=props)
