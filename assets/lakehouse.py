"""Glue shared by the thin Dagster assets: provenance from the run context, metadata formatting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dagster as dg

from iceberg_catalog import Provenance, config_hash


def provenance(
    context: dg.AssetExecutionContext,
    key: dg.AssetKey,
    config: Mapping[str, object],
    upstream_snapshot_ids: Mapping[str, int | None] | None = None,
    extra: Mapping[str, str] | None = None,
) -> Provenance:
    """The snapshot properties every commit of `key` carries (DESIGN invariant 3)."""
    code_version = context.assets_def.code_versions_by_key.get(key) or "unversioned"
    return Provenance(
        asset_key=key.to_user_string(),
        partition_key=context.partition_key if context.has_partition_key else None,
        run_id=context.run.run_id,
        code_version=code_version,
        config_hash=config_hash(config),
        upstream_snapshot_ids=dict(upstream_snapshot_ids or {}),
        extra=dict(extra or {}),
    )


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> dg.MetadataValue:
    """A small Markdown table for the asset's metadata panel."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines))
