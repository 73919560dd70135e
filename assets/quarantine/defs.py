"""Quarantine: benchmarks as data, and every kept document matched against them.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import time

import dagster as dg

from assets import shell
from assets.partitions import benchmarks, dimension_dep, quarantine_partitions
from assets.quarantine import decontaminate, registry
from assets.quarantine.benchmarks import BenchmarkSource, find_source, read_benchmark
from assets.shell import config_from, md_table, params_from, provenance, run_tasks, table_key
from iceberg_catalog.schemas import CURATED_DOCUMENTS, QUARANTINE_EVAL_ITEMS, QUARANTINE_MATCHES
from resources import EvalBenchmarksResource, IcebergCatalogResource, parse_partition_key
from resources.executor import TaskExecutorResource

EVAL_ITEMS = table_key(QUARANTINE_EVAL_ITEMS)
MATCHES = table_key(QUARANTINE_MATCHES)
MatchConfig = config_from(decontaminate.MatchParams, "MatchConfig")


def benchmark_items(name: str, configured: EvalBenchmarksResource, lakehouse) -> tuple[list, dict]:
    """The items of benchmark `name` and what to record about their source: configured in the resource, else
    added with `tokenlake benchmark add` (its content-hashed copy in the lakehouse), else shipped."""
    extra = [
        BenchmarkSource(c.name, c.path, c.format, c.split, tuple(c.fields), None, c.id_field) for c in configured.extra
    ]
    added = None if name in {c.name for c in extra} else registry.registered(lakehouse, name)
    if added is not None:
        return registry.read_registered(lakehouse, added), {"source": added.path, "sha256": added.sha256}
    source = find_source(name, extra)
    return read_benchmark(source), {"source": str(source.path), "format": source.format}


@dg.asset(**shell.table_asset(QUARANTINE_EVAL_ITEMS), partitions_def=benchmarks, code_version="eval-items-1")
def eval_items(
    context: dg.AssetExecutionContext, catalog: IcebergCatalogResource, benchmarks: EvalBenchmarksResource
) -> dg.MaterializeResult:
    """One benchmark's items (benchmark, split, item_id, text built from its fields) (quarantine.eval_items)."""
    name, lakehouse = context.partition_key, catalog.lakehouse()
    items, source = benchmark_items(name, benchmarks, lakehouse)
    writer = lakehouse.writer(QUARANTINE_EVAL_ITEMS, {"benchmark": name})
    writer.write(decontaminate.eval_item_rows(items))
    commit = writer.commit(provenance(context, EVAL_ITEMS, source))
    context.log.info("%s: %d items from %s", name, len(items), source["source"])
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": len(items),
            **source,
            **shell.commit_metadata(commit),
        }
    )


@dg.asset(
    **shell.table_asset(QUARANTINE_MATCHES, ["doc_id", "deletion_key"]),
    partitions_def=quarantine_partitions,
    deps=[dimension_dep(EVAL_ITEMS, "benchmark"), dimension_dep(table_key(CURATED_DOCUMENTS), "segment")],
    code_version="matches-3",
)
def matches(
    context: dg.AssetExecutionContext,
    config: MatchConfig,
    catalog: IcebergCatalogResource,
    executor: TaskExecutorResource,
) -> dg.MaterializeResult:
    """Kept curated documents of a segment that contain items of a benchmark (n-gram overlap or near match),
    with the span; such documents are `eval_contaminated` (quarantine.matches). The screening itself is
    recorded in quarantine.screenings."""
    keys = context.partition_key.keys_by_dimension
    bench, ref = keys["benchmark"], parse_partition_key(keys["segment"])
    params, lakehouse = params_from(decontaminate.MatchParams, config), catalog.lakehouse()
    pins = lakehouse.snapshot_ids(decontaminate.UPSTREAM)
    items = decontaminate.pinned_items(lakehouse, bench, pins[QUARANTINE_EVAL_ITEMS.identifier])
    t0 = time.perf_counter()
    tasks = decontaminate.plan(lakehouse, items, ref.crawl, ref.segment, pins, params, context.run.run_id)
    results = run_tasks(context, executor.executor(), decontaminate.run_task, tasks)
    commit, _ = decontaminate.commit(
        lakehouse, bench, ref.crawl, ref.segment, results, pins, provenance(context, MATCHES, params.hashed(), pins)
    )
    seconds = time.perf_counter() - t0
    screening = decontaminate.Screening.of(results)
    context.log.info(
        "%s x %s: %d documents, %d contaminated",
        bench,
        ref.partition_key,
        screening.documents_checked,
        screening.contaminated_documents,
    )
    return dg.MaterializeResult(
        metadata=matches_metadata(screening, len(items.item_ids), len(tasks), seconds, commit, pins)
    )


def matches_metadata(s: decontaminate.Screening, items: int, tasks: int, seconds: float, commit, pins: dict) -> dict:
    """Counts, rate and the first matches of one (benchmark, segment) screening."""
    return {
        "dagster/row_count": s.matches,
        "documents_checked": s.documents_checked,
        "contaminated_documents": s.contaminated_documents,
        "items": items,
        "tasks": tasks,
        "index_bytes": s.index_bytes,
        "index_build_seconds": round(s.index_build_seconds, 2),
        "documents_per_second": round(s.documents_checked / max(seconds - s.index_build_seconds, 1e-9), 1),
        **shell.commit_metadata(commit, pins),
        "matches": md_table(
            ["doc_id", "item_id", "kind", "score", "span"],
            [(d, i, k, f"{score:.2f}", f"{a}-{b}") for d, i, k, score, a, b in s.sample],
        ),
        **{f"matches_{kind}": s.kinds.get(kind, 0) for kind in ("ngram", "near", "semantic")},
        "semantic_examples": md_table(
            ["doc_id", "item_id", "score", "document", "item"],
            [(d, i, f"{score:.2f}", _cell(doc), _cell(item)) for d, i, score, doc, item in s.semantic_examples],
        ),
    }


def _cell(text: str) -> str:
    """A snippet as one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


register_benchmark_job = shell.asset_job(
    "register_benchmark",
    EVAL_ITEMS,
    description="Read one benchmark (a `benchmarks` partition) into quarantine.eval_items.",
)

decontaminate_job = shell.asset_job(
    "decontaminate",
    MATCHES,
    description="Match one segment's kept documents against one benchmark's items (benchmark x segment).",
)

defs = dg.Definitions(assets=[eval_items, matches], jobs=[register_benchmark_job, decontaminate_job])
