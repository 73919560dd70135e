"""The lakehouse layer: table schemas, catalog configuration, the provenance-carrying commit helper.

Imports no Dagster, so the training-side `loader` package can use the schemas and catalog configuration.
"""

from iceberg_catalog.catalog import CatalogConfig, SchemaMismatch, ensure_tables, open_catalog, tokenlake_home
from iceberg_catalog.commit import CommitResult, PartitionWriter, Provenance, config_hash, overwrite_partition
from iceberg_catalog.schemas import NAMESPACES, TABLES, TableDef

__all__ = [
    "NAMESPACES",
    "TABLES",
    "CatalogConfig",
    "CommitResult",
    "PartitionWriter",
    "Provenance",
    "SchemaMismatch",
    "TableDef",
    "config_hash",
    "ensure_tables",
    "open_catalog",
    "overwrite_partition",
    "tokenlake_home",
]
