"""The thin Dagster shell around the pure state modules: provenance from the run context, running a plan's
tasks on the executor, what every writer of an Iceberg table declares (key, group, pool, erasure, snapshot
metadata), Dagster configs generated from the pure dataclasses, metadata formatting."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence

import dagster as dg
import pydantic

from iceberg_catalog import CommitResult, Provenance, TableDef, config_hash
from iceberg_catalog.erasure import erasure
from resources.executor import TaskExecutor


def provenance(
    context: dg.AssetExecutionContext,
    key: dg.AssetKey,
    config: Mapping[str, object],
    upstream_snapshot_ids: Mapping[str, int | None] | None = None,
    extra: Mapping[str, str] | None = None,
) -> Provenance:
    """The snapshot properties every commit of `key` carries: provenance on every commit (asset, partition,
    run, code version, config hash, upstream snapshots)."""
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


def asset_job(name: str, *keys: dg.AssetKey, description: str) -> dg.UnresolvedAssetJobDefinition:
    """The job that materialises exactly `keys` (a state's jobs are named slices of its assets)."""
    return dg.define_asset_job(name, selection=dg.AssetSelection.assets(*keys), description=description)


def run_tasks(context: dg.AssetExecutionContext, executor: TaskExecutor, fn: Callable, tasks: Sequence) -> list:
    """`executor.map(fn, tasks)`, logging progress about every tenth of the plan."""
    label = context.partition_key if context.has_partition_key else context.asset_key.to_user_string()
    every = max(1, len(tasks) // 10)

    def progress(done: int, total: int) -> None:
        if done % every == 0 or done == total:
            context.log.info("%s: %d/%d tasks done", label, done, total)

    context.log.info("%s: %d tasks planned", label, len(tasks))
    results = executor.map(fn, tasks, progress)
    per_node = getattr(executor, "tasks_per_node", None)  # cluster executors say where tasks ran
    if per_node:
        context.log.info("%s: tasks per node %s", label, dict(sorted(per_node.items())))
    return results


# --- what every asset that writes an Iceberg table declares ---------------------------------------------------


def table_key(t: TableDef) -> dg.AssetKey:
    """The asset that writes table `t`: folder = group = namespace, so its key is the table's identifier."""
    return dg.AssetKey([t.namespace, t.name])


def table_asset(t: TableDef, erase: Sequence[str] = ()) -> dict:
    """The `dg.asset` arguments every writer of table `t` shares: the key, group = namespace, the state's commit
    pool, the iceberg kind, and the table in the metadata with its erasure (the lineage columns a deletion matches
    rows on; none where no deletion reaches the table)."""
    metadata = {"iceberg_table": t.identifier, **(erasure((t, erase)) if erase else {})}
    return {
        "key": table_key(t),
        "group_name": t.namespace,
        "kinds": {"iceberg"},
        "pool": f"iceberg_{t.namespace}",
        "metadata": metadata,
    }


def table_spec(t: TableDef, erase: Sequence[str] = (), **kwargs) -> dg.AssetSpec:
    """`table_asset` as one spec of a multi-asset (the pool is the multi-asset's), plus `kwargs`."""
    shared = {k: v for k, v in table_asset(t, erase).items() if k != "pool"}
    return dg.AssetSpec(**shared, **kwargs)


def commit_metadata(commit: CommitResult, upstream: Mapping[str, int | None] | None = None) -> dict:
    """The snapshot a materialisation committed, and the upstream snapshots it read, as asset metadata."""
    metadata: dict = {"iceberg_snapshot_id": str(commit.snapshot_id)}
    if upstream is not None:
        metadata["upstream_snapshot_ids"] = dg.MetadataValue.json(dict(upstream))
    return metadata


# --- one definition per knob: Dagster configs generated from the pure dataclasses ------------------------


def _config_type(hint):
    """A dataclass field's type as a Dagster config type (tuples become lists, nested dataclasses configs)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = _config_type(args[0]) if len(args) == 1 else hint
        return typing.Optional[inner] if type(None) in typing.get_args(hint) else inner
    if origin is tuple:
        return list[typing.get_args(hint)[0]]
    if dataclasses.is_dataclass(hint):
        return config_from(hint)
    return hint


_GENERATED: dict[type, type] = {}


def config_from(dc: type, name: str | None = None, doc: str | None = None) -> type[dg.Config]:
    """A `dg.Config` class with the dataclass's fields, defaults and explanations (`knob(doc=...)`)."""
    if dc in _GENERATED and name is None:
        return _GENERATED[dc]
    hints = typing.get_type_hints(dc)
    fields = {}
    for f in dataclasses.fields(dc):
        typ = _config_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if dataclasses.is_dataclass(default):
            default = typ(**_as_config_values(default))
        elif isinstance(default, tuple):
            default = list(default)
        fields[f.name] = (typ, pydantic.Field(default=default, description=f.metadata.get("doc")))
    model = pydantic.create_model(
        name or f"{dc.__name__}Config", __base__=dg.Config, __doc__=doc or (dc.__doc__ or "").strip(), **fields
    )
    if name is None:
        _GENERATED[dc] = model
    return model


def _as_config_values(obj) -> dict:
    return {f.name: (list(v) if isinstance(v := getattr(obj, f.name), tuple) else v) for f in dataclasses.fields(obj)}


def params_from(dc: type, config: dg.Config | Mapping):
    """The pure dataclass a generated config describes (lists back to tuples, nested configs to dataclasses)."""
    values = config.model_dump() if isinstance(config, pydantic.BaseModel) else dict(config)
    hints = typing.get_type_hints(dc)
    out = {}
    for f in dataclasses.fields(dc):
        if f.name not in values:
            continue
        v, hint = values[f.name], hints[f.name]
        inner = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        target = inner[0] if len(inner) == 1 else hint
        if dataclasses.is_dataclass(target) and isinstance(v, Mapping):
            v = params_from(target, v)
        elif isinstance(v, list) and typing.get_origin(target) is tuple:
            v = tuple(v)
        out[f.name] = v
    return dc(**out)


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> dg.MetadataValue:
    """A small Markdown table for the asset's metadata panel."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines))
