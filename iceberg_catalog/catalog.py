"""Catalog configuration: the embedded default (SQLite + local warehouse) or any pyiceberg catalog.

Selection is configuration only, no code change:
1. explicit properties (the Dagster resource's `properties`), else
2. a YAML/JSON file named by `TOKENLAKE_CATALOG` (`{name: ..., properties: {type: rest, uri: ...}}`), else
3. the embedded default under `TOKENLAKE_HOME` (default `./.tokenlake`): `catalog.db` + `warehouse/`.
The properties go unchanged to `pyiceberg.catalog.load_catalog`, so PostgreSQL (`type: sql,
uri: postgresql+psycopg2://...`), REST, Glue and an S3 warehouse are all just properties.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

from iceberg_catalog.schemas import NAMESPACES, TABLES, TableDef

DEFAULT_CATALOG_NAME = "tokenlake"


def tokenlake_home() -> Path:
    """The data directory holding the embedded catalog, the warehouse and Dagster's storage."""
    return Path(os.environ.get("TOKENLAKE_HOME", ".tokenlake")).resolve()


@dataclass(frozen=True)
class CatalogConfig:
    """A catalog name plus the pyiceberg properties that open it."""

    name: str = DEFAULT_CATALOG_NAME
    properties: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def embedded(cls, home: Path | str | None = None) -> CatalogConfig:
        """The one-machine default: pyiceberg SqlCatalog on SQLite plus a file warehouse under `home`."""
        root = Path(home).resolve() if home is not None else tokenlake_home()
        return cls(
            DEFAULT_CATALOG_NAME,
            {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": (root / "warehouse").as_uri()},
        )

    @classmethod
    def resolve(cls, name: str | None = None, properties: Mapping[str, str] | None = None) -> CatalogConfig:
        """Pick the configuration by the precedence in the module docstring."""
        if properties:
            return cls(name or DEFAULT_CATALOG_NAME, dict(properties))
        path = os.environ.get("TOKENLAKE_CATALOG")
        if path:
            return cls.from_file(path)
        return cls.embedded()

    @classmethod
    def from_file(cls, path: str | Path) -> CatalogConfig:
        """Read `{name, properties}` from a YAML or JSON file."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"TOKENLAKE_CATALOG points to {str(p)!r}, which is not a file")
        doc = yaml.safe_load(p.read_text()) or {}
        props = doc.get("properties")
        if not isinstance(props, dict) or not props:
            raise ValueError(f"catalog file {str(p)!r} needs a non-empty 'properties' mapping, got {props!r}")
        return cls(str(doc.get("name", DEFAULT_CATALOG_NAME)), {str(k): str(v) for k, v in props.items()})

    @property
    def is_embedded_sqlite(self) -> bool:
        return self.properties.get("type") == "sql" and str(self.properties.get("uri", "")).startswith("sqlite")

    def fingerprint(self) -> str:
        """A stable description used to key per-table commit locks (never contains secrets' values)."""
        return json.dumps({"name": self.name, "uri": self.properties.get("uri", "")}, sort_keys=True)

    def load(self) -> Catalog:
        """Open the catalog (creating the embedded directories when needed)."""
        if self.is_embedded_sqlite:
            db = Path(str(self.properties["uri"]).removeprefix("sqlite:///"))
            db.parent.mkdir(parents=True, exist_ok=True)
            wh = str(self.properties.get("warehouse", ""))
            if wh.startswith("file://"):
                Path(wh.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        return load_catalog(self.name, **self.properties)


class SchemaMismatch(RuntimeError):
    """A table in the catalog does not have the schema declared in iceberg_catalog/schemas.py."""


def ensure_tables(catalog: Catalog, tables: Iterable[TableDef] = TABLES.values()) -> None:
    """Create every namespace and any missing table; refuse an existing table whose schema differs from
    its declaration (field ids, names, types), since data files are written by declared field id."""
    for ns in NAMESPACES:
        try:
            catalog.create_namespace(ns)
        except NamespaceAlreadyExistsError:
            pass
    for t in tables:
        try:
            existing = catalog.load_table(t.identifier)
        except NoSuchTableError:
            try:
                catalog.create_table(
                    t.identifier, schema=t.schema, partition_spec=t.partition_spec, properties=t.properties
                )
            except TableAlreadyExistsError:  # another process won the race: fine
                pass
            continue
        if existing.schema().as_struct() != t.schema.as_struct():
            declared = {f.field_id: (f.name, str(f.field_type)) for f in t.schema.fields}
            actual = {f.field_id: (f.name, str(f.field_type)) for f in existing.schema().fields}
            diff = sorted(set(declared.items()) ^ set(actual.items()))[:6]
            raise SchemaMismatch(
                f"table {t.identifier} in the catalog differs from its declaration (first differences by field id: "
                f"{diff}); migrate it with table.update_schema() or drop it (embedded default: delete "
                f"TOKENLAKE_HOME) and re-materialise"
            )


def open_catalog(config: CatalogConfig | None = None, *, create: bool = True) -> Catalog:
    """Open the configured catalog and, unless `create=False`, make sure namespaces and tables exist."""
    catalog = (config or CatalogConfig.resolve()).load()
    if create:
        ensure_tables(catalog)
    return catalog
