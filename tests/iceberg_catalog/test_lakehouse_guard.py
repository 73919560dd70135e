"""A copied lakehouse is refused before anything is read or written: Iceberg metadata holds absolute paths, so
writing through a copy would change the original's files."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from test_commit import prov, rejects

from iceberg_catalog import CatalogConfig, Lakehouse
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS
from iceberg_catalog.tables import ForeignTableLocation, check_location


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_a_copied_lakehouse_is_refused_and_the_original_untouched(tmp_path):
    original = tmp_path / "original"
    lakehouse = Lakehouse(CatalogConfig.embedded(original))
    writer = lakehouse.writer(RAW_REJECTED_RECORDS, {"crawl": "c", "segment": "s"})
    writer.write(rejects("c", "s", 3))
    writer.commit(prov("r1"))
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    before = tree_hashes(original / "warehouse")

    copied = Lakehouse(CatalogConfig.embedded(copy))
    with pytest.raises(ForeignTableLocation, match=str(original / "warehouse")) as refused:
        copied.writer(RAW_REJECTED_RECORDS, {"crawl": "c", "segment": "s"})
    assert str(copy / "warehouse") in str(refused.value)
    with pytest.raises(ForeignTableLocation):
        copied.scan(RAW_REJECTED_RECORDS)
    assert tree_hashes(original / "warehouse") == before
    assert lakehouse.scan(RAW_REJECTED_RECORDS).num_rows == 3  # the original still works


def test_object_stores_and_catalog_managed_locations_are_not_judged():
    check_location(RAW_REJECTED_RECORDS, "s3://bucket/wh/raw/rejected_records", "s3://bucket/wh")
    check_location(RAW_REJECTED_RECORDS, "s3://other/raw", "my-rest-warehouse")
    check_location(RAW_REJECTED_RECORDS, "file:///data/wh/raw/x", "file:///data/wh")
    with pytest.raises(ForeignTableLocation):
        check_location(RAW_REJECTED_RECORDS, "file:///data/wh2/raw/x", "file:///data/wh")
