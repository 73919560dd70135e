"""The read-only view of the embedded catalog sees exactly what pyiceberg's SqlCatalog sees, and writes nothing."""

from __future__ import annotations

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError

from iceberg_catalog import TABLES, CatalogConfig, open_catalog
from iceberg_catalog.readonly import LocalFileIO, ReadOnlyCatalog, ReadOnlyLakehouseError, read_only_catalog
from iceberg_catalog.schemas import RUN_VIEW_SAMPLES
from tests.loader import views


def test_every_table_reads_the_same_metadata_snapshots_and_rows():
    config = CatalogConfig.embedded(views.lakehouse()["home"])
    sql, ro = open_catalog(config, create=False), read_only_catalog(config)
    assert isinstance(ro, ReadOnlyCatalog) and isinstance(sql, SqlCatalog)
    for ident in TABLES:
        a, b = sql.load_table(ident), ro.load_table(ident)
        assert b.metadata_location == a.metadata_location
        assert b.metadata == a.metadata  # snapshots, refs (the views' tags), properties (layout pointers)
        assert isinstance(b.io, LocalFileIO)
    samples_sql = sql.load_table(RUN_VIEW_SAMPLES.identifier).scan().to_arrow()
    samples_ro = ro.load_table(RUN_VIEW_SAMPLES.identifier).scan().to_arrow()
    assert samples_sql.num_rows > 0 and samples_ro.sort_by("sample_index").equals(samples_sql.sort_by("sample_index"))


def test_it_follows_new_commits_and_names_a_missing_table(tokenlake_home):
    config = CatalogConfig.resolve()
    sql = open_catalog(config)  # creates the declared tables
    ro = read_only_catalog(config)
    table = sql.load_table(RUN_VIEW_SAMPLES.identifier)
    with table.transaction() as tx:
        tx.set_properties({"tokenlake.test": "1"})
    again = ro.load_table(RUN_VIEW_SAMPLES.identifier)  # no caching: the pointer is read on every load
    assert again.metadata_location == sql.load_table(RUN_VIEW_SAMPLES.identifier).metadata_location
    assert again.properties["tokenlake.test"] == "1"
    with pytest.raises(NoSuchTableError, match="nope.missing"):
        ro.load_table("nope.missing")


def test_nothing_can_be_written_through_it(tokenlake_home):
    config = CatalogConfig.resolve()
    open_catalog(config)
    table = read_only_catalog(config).load_table(RUN_VIEW_SAMPLES.identifier)
    target = f"{table.location()}/data/x.parquet"
    with pytest.raises(ReadOnlyLakehouseError, match="x.parquet"):
        table.io.new_output(target)
    with pytest.raises(ReadOnlyLakehouseError, match="metadata"):
        table.io.delete(table.metadata_location)
    with pytest.raises(ValueError, match="s3://bucket/k"):
        table.io.new_input("s3://bucket/k")


def test_other_catalogs_open_as_usual(tmp_path):
    missing = CatalogConfig(
        "tokenlake", {"type": "sql", "uri": f"sqlite:///{tmp_path}/new.db", "warehouse": tmp_path.as_uri()}
    )
    assert isinstance(read_only_catalog(missing), SqlCatalog)  # no database yet: pyiceberg's catalog (creates it)
    memory = CatalogConfig("tokenlake", {"type": "sql", "uri": "sqlite:///:memory:", "warehouse": tmp_path.as_uri()})
    assert isinstance(read_only_catalog(memory), SqlCatalog)
