"""Near-duplicate clusters over every materialised segment as plan -> stages of tasks -> commit. No Dagster.

`plan` pins the three input tables, fingerprints each crawl's inputs and finds the first crawl to recompute
(crawls are clustered in order and earlier crawls' rows never change, so a run recomputes only from the first
crawl whose inputs changed: an incremental run for a new crawl); `execute` runs the stages on an executor,
each task holding one shard, handing rows on through hash-partitioned scratch files (`assets.dedup.shuffle`);
the tasks of stages 1-3 are in `near_pairs`, of 4-5 in `near_components`, what they carry in `near_plan`:

1. scatter, one task per data file of the band rows: each row sent to its (band, band-hash range) partition
   (in an incremental run an earlier crawl's rows only where the added crawls' Bloom filter may hold them);
   candidates, one task per (band, band-hash range): those rows, the pairs sharing a hash;
2. pairs, one task per partition of the pairs' first document: unique pairs (and, to verify, the features
   each pair needs, requested by segment);
3. fetch + verify (verify != "none"): per segment partition, the requested texts or signatures; per pair
   partition, the similarity of each pair in bounded batches;
4. clustering as min-label propagation over the verified edges, one task per node partition per round: an
   edge within a crawl carries labels both ways, an edge into a later crawl only forward, so a crawl's
   component takes the smallest canonical of the earlier clusters it touches, or its own smallest document
   (the crawl-ordered rule of assets/dedup/README.md, computed for every crawl at once);
5. rows, one task per partition of the cluster: cluster sizes as of each row's crawl, the rows of
   `dedup.near_duplicates` written as data files per crawl.
`commit` replaces the recomputed crawls' partitions in one transaction and deletes the scratch files. Every
row is a function of the pinned inputs: not of the partition count, the task order or the executor.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import pyarrow.compute as pc

from assets.dedup import bloom
from assets.dedup.near_components import labels_task, propagate_task, regroup_task, rows_task
from assets.dedup.near_pairs import (
    SCATTER_COLUMNS,
    candidates_task,
    fetch_task,
    merge_filters,
    pairs_task,
    scatter_task,
    verify_task,
)
from assets.dedup.near_plan import (
    INPUTS,
    INPUTS_PROPERTY,
    MAX_ROUNDS,
    NearDuplicateParams,
    NearDuplicatePlan,
    NearDuplicateResult,
    Stage,
    Task,
)
from assets.dedup.shuffle import delete_all
from iceberg_catalog import CommitResult, Lakehouse, Provenance, TaskResult, config_hash
from iceberg_catalog.lakehouse import first_changed_crawl
from iceberg_catalog.schemas import (
    DEDUP_MINHASH_BANDS,
    DEDUP_MINHASH_SIGNATURES,
    DEDUP_NEAR_DUPLICATES,
)

# --- plan ----------------------------------------------------------------------------------------------------


def plan(lakehouse: Lakehouse, params: NearDuplicateParams, run: str) -> NearDuplicatePlan:
    """Pin the inputs, fingerprint every crawl's inputs, find the first crawl to recompute, cut the work."""
    snapshots = lakehouse.snapshot_ids((*INPUTS, DEDUP_NEAR_DUPLICATES))
    fingerprints, documents = crawl_inputs(lakehouse, snapshots)
    first = first_changed(lakehouse, snapshots, params, fingerprints)
    # the work is cut by the recomputed crawls' documents: an earlier crawl's rows reach the later stages only
    # where they pair with a recomputed document
    n_docs = sum(n for crawl, n in documents.items() if first is None or crawl >= first)
    ranges = math.ceil(n_docs / params.docs_per_task) or 1
    parts = params.partitions or math.ceil(n_docs / params.docs_per_partition) or 1
    return NearDuplicatePlan(
        lakehouse,
        params,
        snapshots,
        run,
        # under data/: an S3 Tables bucket (SeaweedFS's REST catalog) refuses writes elsewhere in a table; the
        # orphan sweep removes what a killed run leaves there once it is a day old
        f"{lakehouse.table(DEDUP_NEAR_DUPLICATES).location().rstrip('/')}/data/scratch/{run}",
        fingerprints,
        documents,
        first,
        band_count(lakehouse, snapshots[DEDUP_MINHASH_BANDS.identifier]),
        ranges,
        parts,
    )


def crawl_inputs(lakehouse: Lakehouse, snapshots: Mapping[str, int | None]) -> tuple[dict, dict]:
    """Per crawl: the fingerprint of its band and signature files (`Lakehouse.crawl_fingerprints`) and its
    hashed documents (signature rows, from the manifests: no data file is read)."""
    tables = (DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES)
    fingerprints = lakehouse.crawl_fingerprints({t: snapshots[t.identifier] for t in tables})
    documents: Counter = Counter()
    for s in lakehouse.slices(DEDUP_MINHASH_SIGNATURES, snapshots[DEDUP_MINHASH_SIGNATURES.identifier]):
        for f in s.files:
            documents[str(f.file.partition[0])] += f.file.record_count
    return fingerprints, {c: documents[c] for c in fingerprints}


def first_changed(
    lakehouse: Lakehouse, snapshots: Mapping[str, int | None], params: NearDuplicateParams, fingerprints: Mapping
) -> str | None:
    """The earliest crawl whose inputs differ from those of the table's last commit (new, changed or gone);
    every crawl when the table has no such record or was made with another config; None when nothing changed."""
    return first_changed_crawl(previous_inputs(lakehouse, snapshots, params), fingerprints)


def previous_inputs(
    lakehouse: Lakehouse, snapshots: Mapping[str, int | None], params: NearDuplicateParams
) -> dict[str, str] | None:
    """The per-crawl fingerprints recorded by the table's current snapshot, if it was made with `params`."""
    snapshot_id = snapshots[DEDUP_NEAR_DUPLICATES.identifier]
    if snapshot_id is None:
        return None
    summary = lakehouse.table(DEDUP_NEAR_DUPLICATES).snapshot_by_id(snapshot_id).summary
    recorded = Provenance.from_snapshot_summary(summary.additional_properties if summary else {})
    inputs = json.loads(recorded.get(INPUTS_PROPERTY, "{}"))
    return inputs.get("crawls") if inputs.get("config") == config_hash(params.hashed()) else None


def band_count(lakehouse: Lakehouse, bands_snapshot: int | None) -> int:
    """1 + the largest band number in dedup.minhash_bands, from the data files' column bounds (a scan of the
    `band` column when a file has none); 0 when the table is empty or was never written."""
    if bands_snapshot is None:
        return 0
    field_id = DEDUP_MINHASH_BANDS.schema.find_field("band").field_id
    uppers = [
        (f.file.upper_bounds or {}).get(field_id)
        for s in lakehouse.slices(DEDUP_MINHASH_BANDS, bands_snapshot)
        for f in s.files
    ]
    if any(u is None for u in uppers):
        return scanned_band_count(lakehouse, bands_snapshot)
    return max((struct.unpack("<i", u)[0] + 1 for u in uppers), default=0)


def scanned_band_count(lakehouse: Lakehouse, bands_snapshot: int | None) -> int:
    """`band_count` by reading the `band` column (streamed: bounded memory)."""
    top = -1
    for batch in lakehouse.batches_at(DEDUP_MINHASH_BANDS, bands_snapshot, ("band",)):
        m = pc.max(batch.column(0)).as_py()
        top = top if m is None else max(top, m)
    return top + 1


# --- execute: every stage on the executor ----------------------------------------------------------------------


def execute(p: NearDuplicatePlan, executor) -> NearDuplicateResult:
    """Run the stages (module doc) with `executor.map`; the rows tasks' files are what `commit` adds."""
    if p.first is None or p.bands == 0:
        return NearDuplicateResult((), empty_stats(p), ())
    stages: list[Stage] = []
    scratch: list[str] = []

    def stage(name: str, fn: Callable, tasks: list[Task]) -> list[TaskResult]:
        t0 = time.perf_counter()
        results = sorted(executor.map(fn, tasks), key=lambda r: r.task_index)
        stages.append(stage_cost(name, tasks, results, time.perf_counter() - t0))
        for r in results:
            scratch.extend(r.stats.get("scratch", ()))
        return results

    parts = range(p.parts)
    band_files, sent = scatter(p, stage, scratch)
    cand = stage(
        "candidates",
        candidates_task,
        [Task(b * p.ranges + r, p, (band_files,), band=b) for b in range(p.bands) for r in range(p.ranges)],
    )
    cand_files = (outputs(cand, "pairs"),)
    pairs = stage("pairs", pairs_task, [Task(i, p, cand_files) for i in parts])
    edges = pairs
    if p.params.verify != "none":
        fetched = stage("fetch", fetch_task, [Task(i, p, (outputs(pairs, "requests"),)) for i in parts])
        checks = (outputs(pairs, "pairs"), outputs(fetched, "features"))
        edges = stage("verify", verify_task, [Task(i, p, checks) for i in parts])
    graph = (outputs(edges, "adjacency"), outputs(edges, "nodes"))
    labels = stage("labels", labels_task, [Task(i, p, graph) for i in parts])
    rounds = 0
    while sum(int(r.stats["messages"]) for r in labels):
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise RuntimeError(f"near-duplicate labels did not settle after {MAX_ROUNDS} rounds")
        inputs = (graph[0], outputs(labels, "labels"), outputs(labels, "outbox"))
        labels = stage("propagate", propagate_task, [Task(i, p, inputs, step=rounds) for i in parts])
    grouped = stage("regroup", regroup_task, [Task(i, p, (outputs(labels, "labels"),)) for i in parts])
    rows = stage("rows", rows_task, [Task(i, p, (outputs(grouped, "clusters"),)) for i in parts])
    stats = {**totals(p, pairs, edges, rows, rounds), **sent}
    return NearDuplicateResult(tuple(rows), stats, tuple(merge_rounds(stages)), tuple(scratch))


def scatter(p: NearDuplicatePlan, stage: Callable, scratch: list[str]) -> tuple[tuple[str, ...], dict[str, int]]:
    """Stage 1's first half: the band rows to their (band, range) partitions; the scratch files it wrote, and the
    band rows read and sent on (of the recomputed crawls; of the earlier crawls). When earlier crawls are frozen
    (an incremental run), the added crawls' files go first and build the filter of their band hashes, and the
    earlier crawls' files send on only the rows it may hold."""
    files = p.lakehouse.slices(DEDUP_MINHASH_BANDS, p.snapshot(DEDUP_MINHASH_BANDS), None, SCATTER_COLUMNS)
    crawl = DEDUP_MINHASH_BANDS.partition_by.index("crawl")
    earlier = [s for s in files if str(s.files[0].file.partition[crawl]) < p.first]
    added = [s for s in files if str(s.files[0].file.partition[crawl]) >= p.first]
    words = bloom.size_for(sum(f.file.record_count for s in added for f in s.files)) if earlier else 0
    new = stage("scatter", scatter_task, [Task(i, p, source=s, filter_words=words) for i, s in enumerate(added)])
    old: list[TaskResult] = []
    if earlier:
        union = merge_filters(p, words, outputs(new, "filter"))
        scratch.append(union)
        tasks = [Task(len(added) + i, p, ((union,),), source=s) for i, s in enumerate(earlier)]
        old = stage("scatter-earlier", scatter_task, tasks)
    return outputs(new, "bands") + outputs(old, "bands"), rows_sent(new, "") | rows_sent(old, "earlier_")


def rows_sent(results: Sequence[TaskResult], prefix: str) -> dict[str, int]:
    """Band rows the scatter tasks read and sent on."""
    return {f"{prefix}band_rows_{k}": sum(int(r.stats[f"rows_{k}"]) for r in results) for k in ("read", "sent")}


def outputs(results: Sequence[TaskResult], name: str) -> tuple[str, ...]:
    """The scratch files named `name` that a stage's tasks wrote, in task order."""
    return tuple(r.stats[name] for r in results if name in r.stats)


def commit(
    lakehouse: Lakehouse, p: NearDuplicatePlan, result: NearDuplicateResult, provenance: Provenance
) -> CommitResult:
    """Replace the recomputed crawls' rows with the rows tasks' files (one transaction), recording every crawl's
    input fingerprint for the next run; then delete the scratch files."""
    inputs = {"config": config_hash(p.params.hashed()), "crawls": dict(p.fingerprints)}
    extra = {**provenance.extra, INPUTS_PROPERTY: json.dumps(inputs, sort_keys=True)}
    replaced = sorted(
        set(p.recomputed())
        | {
            c
            for c in lakehouse.stored_crawls(DEDUP_NEAR_DUPLICATES, p.snapshot(DEDUP_NEAR_DUPLICATES))
            if p.first and c >= p.first
        }
    )
    done = lakehouse.commit_partitions(
        DEDUP_NEAR_DUPLICATES,
        [{"crawl": c} for c in replaced],
        result.rows,
        dataclasses.replace(provenance, extra=extra),
    )
    delete_all(lakehouse.file_io(p.scratch), result.scratch_files)
    return done


def stage_cost(name: str, tasks: Sequence[Task], results: Sequence[TaskResult], wall: float) -> Stage:
    return Stage(
        name,
        len(tasks),
        round(wall, 3),
        round(sum(float(r.stats["cpu_s"]) for r in results), 3),
        max((int(r.stats["peak_rss_bytes"]) for r in results), default=0),
        sum(int(r.stats["bytes_read"]) for r in results),
    )


def merge_rounds(stages: list[Stage]) -> list[Stage]:
    """The propagation rounds as one stage (their tasks, times and bytes summed, the largest peak RSS)."""
    rounds = [s for s in stages if s.name == "propagate"]
    if not rounds:
        return stages
    merged = Stage(
        "propagate",
        sum(s.tasks for s in rounds),
        round(sum(s.wall_s for s in rounds), 3),
        round(sum(s.cpu_s for s in rounds), 3),
        max(s.peak_rss_bytes for s in rounds),
        sum(s.bytes_read for s in rounds),
    )
    out = [s for s in stages if s.name != "propagate"]
    out.insert(next(i for i, s in enumerate(stages) if s.name == "propagate"), merged)
    return out


def totals(p: NearDuplicatePlan, pairs, edges, rows, rounds: int) -> dict:
    """The counts the asset reports."""
    by_crawl: Counter = Counter()
    for r in rows:
        by_crawl.update(r.stats["by_crawl"])
    candidate = sum(int(r.stats["candidate_pairs"]) for r in pairs)
    verified = sum(int(r.stats.get("verified_pairs", r.stats.get("candidate_pairs", 0))) for r in edges)
    return {
        **empty_stats(p),
        "candidate_pairs": candidate,
        "verified_pairs": verified,
        "clusters": sum(int(r.stats["clusters"]) for r in rows),
        "near_duplicates": sum(by_crawl.values()),
        "near_duplicates_by_crawl": dict(sorted(by_crawl.items())),
        "rows": sum(int(r.stats["rows"]) for r in rows),
        "rounds": rounds,
    }


def empty_stats(p: NearDuplicatePlan) -> dict:
    return {
        "documents": sum(p.documents.values()),
        "bands": p.bands,
        "recomputed_crawls": p.recomputed(),
        "partitions": p.parts,
        "band_ranges": p.ranges,
        "candidate_pairs": 0,
        "verified_pairs": 0,
        "clusters": 0,
        "near_duplicates": 0,
        "near_duplicates_by_crawl": {},
        "rows": 0,
        "rounds": 0,
        **{f"{w}band_rows_{k}": 0 for w in ("", "earlier_") for k in ("read", "sent")},
    }
