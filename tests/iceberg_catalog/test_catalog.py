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
    f.write_text(json.dumps({"name": "prod", "properties": {"type": "sql", "uri": f"sqlite:///{other}/c.db",
                                                            "warehouse": other.as_uri()}}))
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


def test_ensure_tables_is_idempotent(tokenlake_home):
    catalog = open_catalog()
    before = {i: catalog.load_table(i).metadata_location for i in TABLES}
    ensure_tables(catalog)
    assert before == {i: catalog.load_table(i).metadata_location for i in TABLES}


@pytest.mark.parametrize("ident", sorted(TABLES))
def test_schemas_have_explicit_unique_ids_and_lineage_keys(ident):
    t = TABLES[ident]
    ids = [f.field_id for f in t.schema.fields]
    assert len(ids) == len(set(ids)) and ids == sorted(ids)
    assert t.namespace in NAMESPACES
    names = set(t.schema.column_names)
    assert {"crawl", "segment"} <= names
    assert set(t.partition_by) <= names
    assert [f.source_id for f in t.partition_spec.fields] == [t.schema.find_field(c).field_id for c in t.partition_by]
    # Arrow schema used for data files carries the Iceberg field ids
    assert all(f.metadata and b"PARQUET:field_id" in f.metadata for f in t.arrow_schema)
