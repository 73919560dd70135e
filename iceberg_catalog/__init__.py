"""The lakehouse layer: table schemas, catalog configuration, the one lakehouse handle, the commit helper,
the run view contract and the erasure declaration.

Imports no Dagster, so the training-side `loader` package can use the schemas, the handle and the contract.
"""

from iceberg_catalog.catalog import CatalogConfig, SchemaMismatch, ensure_tables, open_catalog, tokenlake_home
from iceberg_catalog.commit import (
    CommitResult,
    FileWriter,
    PartitionWriter,
    Provenance,
    TaskOutput,
    TaskResult,
    WrittenFiles,
    config_hash,
)
from iceberg_catalog.lakehouse import Lakehouse, ScanSlice
from iceberg_catalog.schemas import NAMESPACES, TABLES, TableDef

__all__ = [
    "NAMESPACES",
    "TABLES",
    "CatalogConfig",
    "CommitResult",
    "FileWriter",
    "Lakehouse",
    "PartitionWriter",
    "Provenance",
    "ScanSlice",
    "SchemaMismatch",
    "TableDef",
    "TaskOutput",
    "TaskResult",
    "WrittenFiles",
    "config_hash",
    "ensure_tables",
    "open_catalog",
    "tokenlake_home",
]
