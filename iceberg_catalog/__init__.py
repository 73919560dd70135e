"""The lakehouse layer: table schemas, catalog configuration, the one lakehouse handle, the commit helper,
the run view contract and the erasure declaration.

Imports no Dagster, so the training-side `loader` package can use the schemas, the handle and the contract; the
names below are imported on first use (a training process that reads its view through `metadata_files` never
imports pyiceberg).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and editors see; at run time `__getattr__` below imports these on first use
    from iceberg_catalog.catalog import CatalogConfig, tokenlake_home
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
    from iceberg_catalog.tables import SchemaMismatch, ensure_tables, open_catalog

# name -> the module defining it: imported on first use (lazy only for start-up cost, not for a cycle: the modules
# import each other at module level, one way), so that a process importing one light module of the package does
# not import pyiceberg through the others: `import loader` imports run_view_contract and metadata_files only
_EXPORTS = {
    "CatalogConfig": "catalog",
    "tokenlake_home": "catalog",
    "CommitResult": "commit",
    "FileWriter": "commit",
    "PartitionWriter": "commit",
    "Provenance": "commit",
    "TaskOutput": "commit",
    "TaskResult": "commit",
    "WrittenFiles": "commit",
    "config_hash": "commit",
    "Lakehouse": "lakehouse",
    "ScanSlice": "lakehouse",
    "NAMESPACES": "schemas",
    "TABLES": "schemas",
    "TableDef": "schemas",
    "SchemaMismatch": "tables",
    "ensure_tables": "tables",
    "open_catalog": "tables",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


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
