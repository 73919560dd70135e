"""How each asset's rows are erased: the declaration every asset downstream of raw carries as metadata.

A leaf module (no Dagster, no project import but the schemas): states declare their erasure here, and
governance reads the declarations back from the asset graph; no state imports governance.
"""

from __future__ import annotations

from collections.abc import Sequence

from iceberg_catalog.schemas import TableDef

ERASURE_KEY = "tokenlake/erasure"
# the columns a deletion request resolves to, and which a declaration may match rows on
LINEAGE_COLUMNS = ("record_id", "deletion_key", "doc_id")


def erasure(*tables: tuple[TableDef, Sequence[str]], run_views: bool = False) -> dict:
    """Asset metadata declaring how propagation deletes this asset's rows: (table, lineage columns) pairs;
    `run_views` marks the asset whose rows make up run views (they are superseded, then erased)."""
    for t, columns in tables:
        names = {f.name for f in t.schema.fields}
        bad = [c for c in columns if c not in LINEAGE_COLUMNS or c not in names]
        if bad or not columns:
            raise ValueError(
                f"erasure of {t.identifier} cannot match rows on {bad or 'no column'}: lineage columns "
                f"are {LINEAGE_COLUMNS} and must exist in the table"
            )
    return {
        ERASURE_KEY: {
            "tables": [{"table": t.identifier, "columns": list(cols)} for t, cols in tables],
            "run_views": run_views,
        }
    }
