"""Evaluation quarantine assets: benchmarks as data, and every kept document matched against them.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import time
from datetime import datetime, timezone

import dagster as dg
import pyarrow as pa
from pyiceberg.expressions import And, EqualTo

from assets.governance.propagate import erasure
from assets.curated.defs import DOCUMENTS
from assets.lakehouse import md_table, provenance
from assets.partitions import benchmarks, dimension_dep, quarantine_partitions
from assets.quarantine.benchmarks import DEFAULT_SOURCES, BenchmarkSource, read_benchmark
from assets.quarantine.near_match import DEFAULT_THRESHOLD as NEAR_THRESHOLD
from assets.quarantine.near_match import NearMatchIndex, find_matches
from assets.quarantine.ngrams import DEFAULT_N, NgramIndex, normalise_words
from iceberg_catalog import TABLES
from resources import EvalBenchmarksResource, IcebergCatalogResource, parse_partition_key

EVAL_ITEMS = dg.AssetKey(["quarantine", "eval_items"])
MATCHES = dg.AssetKey(["quarantine", "matches"])
DECISION_EVAL_CONTAMINATED = "eval_contaminated"


def benchmark_source(name: str, configured: EvalBenchmarksResource) -> BenchmarkSource:
    """The shipped source of that name, or one configured in the resource."""
    sources = {s.name: s for s in DEFAULT_SOURCES}
    for c in configured.extra:
        sources[c.name] = BenchmarkSource(c.name, c.path, c.format, c.split, tuple(c.fields), None, c.id_field)
    if name not in sources:
        raise KeyError(f"unknown benchmark {name!r}: shipped {sorted(s.name for s in DEFAULT_SOURCES)}; add others "
                       f"under the `benchmarks` resource's `extra`")
    return sources[name]


@dg.asset(key=EVAL_ITEMS, partitions_def=benchmarks, group_name="quarantine", code_version="eval-items-1",
          kinds={"iceberg"}, pool="iceberg_quarantine",
          description="One benchmark's items (benchmark, split, item_id, text built from its fields) "
                      "(quarantine.eval_items).")
def eval_items(context: dg.AssetExecutionContext, catalog: IcebergCatalogResource,
               benchmarks: EvalBenchmarksResource) -> dg.MaterializeResult:
    name = context.partition_key
    source = benchmark_source(name, benchmarks)
    items = read_benchmark(source)
    writer = catalog.partition_writer("quarantine.eval_items", {"benchmark": name})
    writer.write(pa.table({
        "benchmark": [i.benchmark for i in items], "split": [i.split for i in items],
        "item_id": [i.item_id for i in items], "text": [i.text for i in items],
        "n_words": pa.array([len(normalise_words(i.text).words) for i in items], pa.int32()),
    }))
    commit = writer.commit(provenance(context, EVAL_ITEMS, {"source": str(source.path), "format": source.format}))
    context.log.info("%s: %d items from %s", name, len(items), source.path)
    return dg.MaterializeResult(metadata={"dagster/row_count": len(items), "source": str(source.path),
                                          "iceberg_snapshot_id": str(commit.snapshot_id)})


class MatchConfig(dg.Config):
    """Exact overlap of normalised word n-grams (GPT-3 style, n=13), plus near matches (light edits) with an
    aligned-window similarity of at least `near_threshold`."""

    n: int = DEFAULT_N
    near: bool = True
    near_threshold: float = NEAR_THRESHOLD


@dg.asset(
    key=MATCHES,
    metadata=erasure(("quarantine.matches", ["doc_id", "deletion_key"])),
    partitions_def=quarantine_partitions,
    deps=[
        dimension_dep(EVAL_ITEMS, "benchmark"),
        dimension_dep(DOCUMENTS, "segment"),
    ],
    group_name="quarantine",
    code_version="matches-1",
    kinds={"iceberg"},
    pool="iceberg_quarantine",
    description="Kept curated documents of a segment that contain items of a benchmark (n-gram overlap or near "
                "match), with the span; such documents are `eval_contaminated` (quarantine.matches); the screening itself is "
                "recorded in quarantine.screenings.",
)
def matches(context: dg.AssetExecutionContext, config: MatchConfig,
            catalog: IcebergCatalogResource) -> dg.MaterializeResult:
    keys = context.partition_key.keys_by_dimension
    bench, ref = keys["benchmark"], parse_partition_key(keys["segment"])
    upstream = catalog.snapshot_ids(("quarantine.eval_items", "curated.documents"))
    items = catalog.table("quarantine.eval_items").scan(
        row_filter=EqualTo("benchmark", bench), selected_fields=("item_id", "text"),
        snapshot_id=upstream["quarantine.eval_items"]).to_arrow() if upstream["quarantine.eval_items"] else None
    if items is None or items.num_rows == 0:
        raise ValueError(f"benchmark {bench!r} has no items in quarantine.eval_items: materialise "
                         f"quarantine/eval_items for partition {bench!r} first")
    item_ids = items["item_id"].to_pylist()
    texts = items["text"].to_pylist()
    t0 = time.perf_counter()
    ngram_index = NgramIndex.build(texts, n=config.n)
    near_index = NearMatchIndex.build(texts, threshold=config.near_threshold) if config.near else None
    build_seconds = time.perf_counter() - t0
    docs = catalog.table("curated.documents").scan(
        row_filter=And(EqualTo("crawl", ref.crawl), And(EqualTo("segment", ref.segment), EqualTo("kept", True))),
        selected_fields=("doc_id", "deletion_key", "text"), snapshot_id=upstream["curated.documents"],
    ).to_arrow_batch_reader()
    out: dict[str, list] = {k: [] for k in ("doc_id", "crawl", "segment", "benchmark", "item_id", "kind",
                                            "overlap_fraction", "char_start", "char_end", "decision",
                                            "deletion_key")}
    n_docs = 0
    for batch in docs:
        for doc in batch.to_pylist():
            n_docs += 1
            for m in find_matches(doc["text"] or "", ngram_index, near_index):
                for k, v in (("doc_id", doc["doc_id"]), ("crawl", ref.crawl), ("segment", ref.segment),
                             ("benchmark", bench), ("item_id", item_ids[m.item_index]), ("kind", m.kind),
                             ("overlap_fraction", float(m.score)), ("char_start", m.char_start),
                             ("char_end", m.char_end), ("decision", DECISION_EVAL_CONTAMINATED),
                             ("deletion_key", doc["deletion_key"])):
                    out[k].append(v)
    writer = catalog.partition_writer("quarantine.matches", {"benchmark": bench, "crawl": ref.crawl,
                                                             "segment": ref.segment})
    writer.write(pa.table(out))
    prov = provenance(context, MATCHES, config.model_dump(), upstream)
    commit = writer.commit(prov)
    seconds = time.perf_counter() - t0
    contaminated = sorted(set(out["doc_id"]))
    screening = catalog.partition_writer("quarantine.screenings", {"benchmark": bench, "crawl": ref.crawl,
                                                                   "segment": ref.segment})
    screening.write(pa.Table.from_pylist([{
        "benchmark": bench, "crawl": ref.crawl, "segment": ref.segment, "documents_checked": n_docs,
        "contaminated_documents": len(contaminated), "matches": len(out["doc_id"]),
        "eval_items_snapshot_id": upstream["quarantine.eval_items"],
        "curated_snapshot_id": upstream["curated.documents"], "screened_at": datetime.now(timezone.utc),
        "dagster_run_id": context.run.run_id}], schema=TABLES["quarantine.screenings"].arrow_schema))
    screening.commit(prov)
    context.log.info("%s x %s: %d documents, %d contaminated", bench, ref.partition_key, n_docs, len(contaminated))
    return dg.MaterializeResult(metadata={
        "dagster/row_count": len(out["doc_id"]),
        "documents_checked": n_docs,
        "contaminated_documents": len(contaminated),
        "items": len(item_ids),
        "index_bytes": ngram_index.nbytes + (near_index.nbytes if near_index else 0),
        "index_build_seconds": round(build_seconds, 2),
        "documents_per_second": round(n_docs / max(seconds - build_seconds, 1e-9), 1),
        "iceberg_snapshot_id": str(commit.snapshot_id),
        "upstream_snapshot_ids": dg.MetadataValue.json(upstream),
        "matches": md_table(["doc_id", "item_id", "kind", "score", "span"],
                            [(d, i, k, f"{s:.2f}", f"{a}-{b}") for d, i, k, s, a, b in
                             zip(out["doc_id"], out["item_id"], out["kind"], out["overlap_fraction"],
                                 out["char_start"], out["char_end"])][:30]),
    })


assets = [eval_items, matches]
