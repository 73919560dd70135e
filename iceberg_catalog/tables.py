"""The declared tables in a catalog: every namespace and table created (`ensure_tables`), a table made by an
older declaration migrated when the new one only appends optional columns, a table refused when its schema
differs otherwise or its files live outside the warehouse (`check_location`)."""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

from iceberg_catalog.catalog import CatalogConfig, lost_create_race
from iceberg_catalog.metadata_files import local_path
from iceberg_catalog.schemas import NAMESPACES, TABLES, TableDef


class ForeignTableLocation(RuntimeError):
    """A table's files lie outside the configured warehouse: writing would change another lakehouse."""


def check_location(t: TableDef, location: str, warehouse: str) -> None:
    """Refuse a local table whose location is not under a local warehouse. Iceberg metadata holds absolute
    paths, so a copied lakehouse (`cp -a .tokenlake elsewhere`) still points at the original's files: writing
    through the copy would rewrite the original."""
    root, path = local_path(warehouse), local_path(location)
    if root is None or path is None or path == root or path.startswith(root + "/"):
        return
    raise ForeignTableLocation(
        f"table {t.identifier} lives at {path!r}, outside this lakehouse's warehouse {root!r}: its metadata "
        f"belongs to another lakehouse (a copied TOKENLAKE_HOME keeps the original's absolute paths), and "
        f"writing here would change that one. Point TOKENLAKE_HOME at the original, or start an empty "
        f"TOKENLAKE_HOME and re-materialise; nothing was read or written"
    )


class SchemaMismatch(RuntimeError):
    """A table in the catalog does not have the schema declared in iceberg_catalog/schemas.py."""


def _add_declared_columns(existing, t: TableDef) -> bool:
    """Migrate a table made by an older version: when the declaration only appends optional primitive columns
    whose declared field ids are the ones Iceberg will assign next, add them (old rows read them as null) and
    return True; anything else is not a migration this can make (False)."""
    have = {f.field_id: f for f in existing.schema().fields}
    added = [f for f in t.schema.fields if f.field_id not in have]
    kept = [f for f in t.schema.fields if f.field_id in have]
    if not added or len(kept) != len(have) or any(have[f.field_id] != f for f in kept):
        return False
    next_id = existing.metadata.last_column_id + 1
    if [f.field_id for f in added] != list(range(next_id, next_id + len(added))):
        return False
    if any(f.required or not f.field_type.is_primitive for f in added):
        return False
    with existing.update_schema() as update:
        for f in added:
            update.add_column(f.name, f.field_type, doc=f.doc)
    return existing.refresh().schema().as_struct() == t.schema.as_struct()


def ensure_tables(catalog: Catalog, tables: Iterable[TableDef] | None = None) -> None:
    """Create every namespace and any missing table (`tables`: all of iceberg_catalog.schemas by default); add
    the optional columns a newer declaration appends (`_add_declared_columns`); refuse an existing table whose
    schema differs otherwise from its declaration (field ids, names, types), since data files are written by
    declared field id."""
    tables = TABLES.values() if tables is None else tables
    for ns in NAMESPACES:
        try:
            catalog.create_namespace(ns)
        except NamespaceAlreadyExistsError:
            pass
        except Exception as exc:  # noqa: BLE001 - another process created it between check and insert
            if not lost_create_race(exc):
                raise
    for t in tables:
        try:
            existing = catalog.load_table(t.identifier)
            check_location(t, existing.location(), str(catalog.properties.get("warehouse", "")))
        except NoSuchTableError:
            try:
                catalog.create_table(
                    t.identifier, schema=t.schema, partition_spec=t.partition_spec, properties=t.properties
                )
            except TableAlreadyExistsError:  # another process won the race: fine
                pass
            except Exception as exc:  # noqa: BLE001 - the same race, seen by the database
                if not lost_create_race(exc):
                    raise
            continue
        if existing.schema().as_struct() != t.schema.as_struct() and not _add_declared_columns(existing, t):
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
