"""Catalog configuration and table declarations, on a real embedded catalog."""

from __future__ import annotations

import json

import pytest

from iceberg_catalog import NAMESPACES, TABLES, CatalogConfig, ensure_tables, open_catalog


def test_embedded_default_lives_under_tokenlake_home(tokenlake_home):
    cfg = CatalogConfig.resolve()
    assert cfg.is_embedded_sqlite
    assert cfg.properties["uri"] == f"sqlite:///{tokenlake_home / 'catalog.db'}"
    assert cfg.properties["warehouse"] == (tokenlake_home / "warehouse").as_uri()
    catalog = open_catalog(cfg)
    assert (tokenlake_home / "catalog.db").is_file()
    assert {ns[0] for ns in catalog.list_namespaces()} >= set(NAMESPACES)
    for ident in TABLES:
        assert catalog.load_table(ident).schema() == TABLES[ident].schema


def test_catalog_is_selected_by_configuration_file(tokenlake_home, tmp_path, monkeypatch):
    other = tmp_path / "elsewhere"
    other.mkdir()
    f = tmp_path / "catalog.yaml"
    f.write_text(
        json.dumps(
            {
                "name": "prod",
                "properties": {"type": "sql", "uri": f"sqlite:///{other}/c.db", "warehouse": other.as_uri()},
            }
        )
    )
    monkeypatch.setenv("TOKENLAKE_CATALOG", str(f))
    cfg = CatalogConfig.resolve()
    assert cfg.name == "prod" and cfg.properties["uri"].endswith("elsewhere/c.db")
    open_catalog(cfg)
    assert (other / "c.db").is_file() and not (tokenlake_home / "catalog.db").exists()
    # explicit properties (the Dagster resource's) win over the file
    assert CatalogConfig.resolve("x", {"type": "rest", "uri": "http://127.0.0.1:1"}).properties["type"] == "rest"


def test_bad_catalog_file_names_the_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENLAKE_CATALOG", str(tmp_path / "missing.yaml"))
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        CatalogConfig.resolve()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    monkeypatch.setenv("TOKENLAKE_CATALOG", str(bad))
    with pytest.raises(ValueError, match="properties"):
        CatalogConfig.resolve()


def test_catalog_field_ids_equal_the_declared_ids(tokenlake_home):
    catalog = open_catalog()
    for ident, t in TABLES.items():
        assert catalog.load_table(ident).schema().as_struct() == t.schema.as_struct(), ident


def test_non_sequential_ids_are_refused_at_declaration():
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    from iceberg_catalog.schemas import TableDef

    with pytest.raises(ValueError, match="1..N"):
        TableDef("raw", "x", Schema(NestedField(1, "a", StringType()), NestedField(5, "b", StringType())))


def test_a_drifted_table_is_refused_with_the_difference(tokenlake_home):
    from pyiceberg.types import StringType

    from iceberg_catalog import SchemaMismatch

    catalog = open_catalog()
    with catalog.load_table("raw.rejected_records").update_schema() as upd:
        upd.add_column("surprise", StringType())
    with pytest.raises(SchemaMismatch, match="raw.rejected_records.*surprise"):
        ensure_tables(catalog)


def test_ensure_tables_is_idempotent(tokenlake_home):
    catalog = open_catalog()
    before = {i: catalog.load_table(i).metadata_location for i in TABLES}
    ensure_tables(catalog)
    assert before == {i: catalog.load_table(i).metadata_location for i in TABLES}


LINEAGE_TABLES = {
    "raw.warc_records": {"record_id", "deletion_key", "crawl", "segment"},
    "raw.rejected_records": {"crawl", "segment", "deletion_key", "record_id"},
    "curated.documents": {"doc_id", "record_id", "deletion_key", "crawl", "segment"},
    "curated.exact_duplicates": {"doc_id", "crawl", "segment"},
}


@pytest.mark.parametrize("ident", sorted(TABLES))
def test_schemas_have_explicit_ids_and_lineage_keys(ident):
    t = TABLES[ident]
    assert [f.field_id for f in t.schema.fields] == list(range(1, len(t.schema.fields) + 1))
    assert t.namespace in NAMESPACES
    names = set(t.schema.column_names)
    assert LINEAGE_TABLES.get(ident, set()) <= names
    assert set(t.partition_by) <= names
    assert [f.source_id for f in t.partition_spec.fields] == [t.schema.find_field(c).field_id for c in t.partition_by]
    # Arrow schema used for data files carries the Iceberg field ids
    assert all(f.metadata and b"PARQUET:field_id" in f.metadata for f in t.arrow_schema)


def test_a_table_from_an_older_declaration_gets_the_appended_columns(tokenlake_home):
    """A lakehouse made before a field was appended to a declaration keeps working: the column is added (old
    rows read it as null), nothing else changes."""
    from pyiceberg.schema import Schema

    from iceberg_catalog import CatalogConfig
    from iceberg_catalog.schemas import CURATED_DOCUMENTS as T

    catalog = CatalogConfig.resolve().load()
    for ns in ("raw", "curated", "dedup", "tokenized", "quarantine", "run_view", "governance"):
        catalog.create_namespace_if_not_exists(ns)
    older = Schema(*T.schema.fields[:-1])
    catalog.create_table(T.identifier, schema=older, partition_spec=T.partition_spec, properties=T.properties)
    ensure_tables(catalog)
    table = catalog.load_table(T.identifier)
    assert table.schema().as_struct() == T.schema.as_struct()
    assert table.schema().fields[-1].name == T.schema.fields[-1].name


def test_only_the_first_open_race_of_a_sql_catalog_is_retried():
    from iceberg_catalog.catalog import lost_create_race

    class IntegrityError(Exception):
        pass

    dup = 'duplicate key value violates unique constraint "pg_type_typname_nsp_index"'
    assert lost_create_race(IntegrityError(dup))
    assert not lost_create_race(IntegrityError("null value in column violates not-null constraint"))
    assert not lost_create_race(ValueError(dup))


def test_release_closes_the_catalogs_pooled_connections_and_it_still_works(tokenlake_home):
    from iceberg_catalog import Lakehouse
    from iceberg_catalog.schemas import RAW_WARC_RECORDS

    lakehouse = Lakehouse(CatalogConfig.embedded())
    assert lakehouse.snapshot_id(RAW_WARC_RECORDS) is None  # opens the catalog: a connection back in the pool
    engine = lakehouse.catalog.engine
    assert engine.pool.checkedin() >= 1
    lakehouse.release()
    assert engine.pool.checkedin() == 0  # closed now, not at garbage collection
    assert lakehouse.snapshot_id(RAW_WARC_RECORDS) is None  # and the catalog reconnects when used again
    Lakehouse(catalog=None).release()  # nothing opened: nothing to close
