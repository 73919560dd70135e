"""`tokenlake benchmark add|list`: evaluation benchmarks by command instead of by editing the `benchmarks`
resource.

tokenlake benchmark add NAME FILE --format jsonl|csv|parquet --text-fields a,b [--split S]
    checks the file (a bad one is refused naming the file and line), copies it into the lakehouse under its
    sha256 (assets/quarantine/registry.py), adds NAME as a partition of the `benchmarks` dimension, runs
    `register_benchmark` for it and `decontaminate` for it on every segment whose curated documents exist,
    through the same jobs the UI launches, then reports the contaminated documents.
tokenlake benchmark list
    every benchmark partition: where its items come from, items, segments screened, contaminated documents.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from pyiceberg.expressions import EqualTo, In

from assets.quarantine import registry
from assets.quarantine.benchmarks import DEFAULT_SOURCES
from iceberg_catalog import Lakehouse
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    QUARANTINE_EVAL_ITEMS,
    QUARANTINE_MATCHES,
    QUARANTINE_SCREENINGS,
)

SHOWN = 20  # contaminated documents printed by `add`


def _defs_and_instance():
    from orchestration.instance import prepare_dagster_home

    prepare_dagster_home()
    import dagster as dg

    from orchestration.definitions import build_defs  # after DAGSTER_HOME is set

    return build_defs(), dg.DagsterInstance.get()


def curated_segments(instance) -> list[str]:
    """Segments with a materialisation of curated/documents, sorted."""
    import dagster as dg

    key = dg.AssetKey([CURATED_DOCUMENTS.namespace, CURATED_DOCUMENTS.name])
    return sorted(instance.get_materialized_partitions(key))


def cmd_add(args) -> int:
    import dagster as dg

    from orchestration import demo

    demo.VERBOSE = args.verbose  # its run_job prints Dagster's events (a failure in full) only then
    fields = [f.strip() for f in args.text_fields.split(",") if f.strip()]
    defs, instance = _defs_and_instance()
    with instance:
        lakehouse = defs.resources["catalog"].lakehouse()
        try:
            added = registry.register(lakehouse, args.name, Path(args.file), args.format, fields, args.split)
        except registry.BenchmarkFileError as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return 2
        print(f"{added.name}: {added.items} items, sha256 {added.sha256[:16]}..., copied to {added.path}")
        instance.add_dynamic_partitions("benchmarks", [added.name])
        demo.run_job(defs, instance, "register_benchmark", added.name)
        segments = curated_segments(instance)
        for segment in segments:
            demo.run_job(
                defs, instance, "decontaminate", dg.MultiPartitionKey({"benchmark": added.name, "segment": segment})
            )
    if not segments:
        print("no curated segment yet: run `tokenlake run` (or `make demo`); new segments are screened as they land")
    report(lakehouse, added.name)
    return 0


def report(lakehouse: Lakehouse, name: str) -> None:
    """The benchmark's screenings and contaminated documents (url, items, best overlap)."""
    screened = lakehouse.scan(QUARANTINE_SCREENINGS, row_filter=EqualTo("benchmark", name)).to_pylist()
    matches = lakehouse.scan(QUARANTINE_MATCHES, row_filter=EqualTo("benchmark", name)).to_pylist()
    by_doc: dict[str, list[dict]] = defaultdict(list)
    for m in matches:
        by_doc[m["doc_id"]].append(m)
    docs = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", "url"), In("doc_id", sorted(by_doc))) if by_doc else None
    urls = dict(zip(docs["doc_id"].to_pylist(), docs["url"].to_pylist())) if docs is not None else {}
    checked = sum(r["documents_checked"] for r in screened)
    print(
        f"\n{name}: {len(screened)} segments screened, {checked} kept documents checked, "
        f"{len(by_doc)} contaminated ({len(matches)} matches)"
    )
    ranked = sorted(by_doc.items(), key=lambda kv: (-max(m["overlap_fraction"] for m in kv[1]), kv[0]))
    for doc_id, ms in ranked[:SHOWN]:
        items = sorted({m["item_id"] for m in ms})
        best = max(ms, key=lambda m: m["overlap_fraction"])
        print(
            f"  {doc_id[:16]}  {urls.get(doc_id, '?')[:60]:<60}  {len(items)} items "
            f"(best {best['item_id']}: {best['kind']} {best['overlap_fraction']:.2f})"
        )
    if len(ranked) > SHOWN:
        print(f"  ... and {len(ranked) - SHOWN} more (quarantine.matches, benchmark = {name!r})")


def cmd_list(_args) -> int:
    defs, instance = _defs_and_instance()
    with instance:
        names = sorted(set(instance.get_dynamic_partitions("benchmarks")) | {s.name for s in DEFAULT_SOURCES})
    lakehouse = defs.resources["catalog"].lakehouse()
    items = defaultdict(int)
    for b in lakehouse.scan(QUARANTINE_EVAL_ITEMS, ("benchmark",))["benchmark"].to_pylist():
        items[b] += 1
    screened, contaminated = defaultdict(int), defaultdict(int)
    for r in lakehouse.scan(QUARANTINE_SCREENINGS, ("benchmark", "contaminated_documents")).to_pylist():
        screened[r["benchmark"]] += 1
        contaminated[r["benchmark"]] += r["contaminated_documents"]
    print(f"{'benchmark':<16} {'items':>7} {'segments':>8} {'contaminated':>12}  source")
    for name in names:
        added = registry.registered(lakehouse, name)
        source = (
            f"added: {added.format} {','.join(added.text_fields)} sha256 {added.sha256[:12]} from {added.original}"
            if added
            else "shipped"
        )
        print(f"{name:<16} {items[name]:>7} {screened[name]:>8} {contaminated[name]:>12}  {source}")
    return 0


def register_parser(sub) -> None:
    """`benchmark add` and `benchmark list` under the `tokenlake` parser's subcommands."""
    bench = sub.add_parser("benchmark", help="add an evaluation benchmark from a file, or list them")
    actions = bench.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="register a benchmark file and screen every curated segment against it")
    add.add_argument("name", help="partition key: a-z, 0-9, '_' and '-'")
    add.add_argument("file", help="the benchmark file")
    add.add_argument("--format", required=True, choices=registry.USER_FORMATS)
    add.add_argument("--text-fields", required=True, help="comma-separated fields joined into each item's text")
    add.add_argument("--split", default="test")
    add.set_defaults(fn=cmd_add)
    actions.add_parser("list", help="every benchmark with items and contamination").set_defaults(fn=cmd_list)
