"""Near-duplicate clusters over every materialised segment as plan -> stages of tasks -> commit. No Dagster.

`plan` pins the three input tables, fingerprints each crawl's inputs and finds the first crawl to recompute
(crawls are clustered in order and earlier crawls' rows never change, so a run recomputes only from the first
crawl whose inputs changed: an incremental run for a new crawl); `execute` runs the stages on an executor,
each task holding one shard, handing rows on through hash-partitioned scratch files (`assets.dedup.shuffle`):

1. scatter, one task per data file of the band rows: each row sent to its (band, band-hash range) partition;
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
import resource
import struct
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import (
    And,
    EqualTo,
    In,
    LessThan,
)

from assets.dedup.minhash import MinHashParams, exact_jaccard, shingles
from assets.dedup.shuffle import PartWriter, delete_all, keys, partition_of, read_part, split_keys, write_parts
from assets.knobs import knob
from iceberg_catalog import CommitResult, FileWriter, Lakehouse, Provenance, ScanSlice, TaskResult, config_hash
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    DEDUP_MINHASH_BANDS,
    DEDUP_MINHASH_SIGNATURES,
    DEDUP_NEAR_DUPLICATES,
)

DECISION_NEAR_DUPLICATE = "near_duplicate"
INPUTS = (DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES, CURATED_DOCUMENTS)
Verify = Literal["exact", "estimated", "none"]
VERIFY_MODES: tuple[str, ...] = get_args(Verify)
# A bucket with more members than this contributes a star (every member to the bucket's first) instead of all
# pairs: such buckets are templates or boilerplate where all pairs would be quadratic.
MAX_ALL_PAIRS_BUCKET = 32
INPUTS_PROPERTY = "near-inputs"  # snapshot property: the config hash and {crawl: input fingerprint} of the rows
VERIFY_BATCH = 65536  # pairs compared at once
MAX_SHINGLE_SETS = 4096  # documents' shingle sets a verify task keeps (a few hundred MB of Python sets at most)
MAX_ROUNDS = 1000  # label propagation rounds before the run fails (a chain this long is not a near duplicate)

BAND_ROWS = pa.schema([("key", pa.string()), ("segment", pa.string()), ("h", pa.int64())])
PAIRS = pa.schema([("a", pa.string()), ("b", pa.string()), ("a_seg", pa.string()), ("b_seg", pa.string())])
REQUESTS = pa.schema([("key", pa.string()), ("segment", pa.string()), ("part", pa.int64())])
ADJACENCY = pa.schema([("src", pa.string()), ("dst", pa.string())])
NODES = pa.schema([("node", pa.string()), ("segment", pa.string())])
LABELS = pa.schema([("node", pa.string()), ("segment", pa.string()), ("label", pa.string())])
MESSAGES = pa.schema([("dst", pa.string()), ("label", pa.string())])


@dataclass(frozen=True)
class NearDuplicateParams:
    """Documents sharing a band are candidates; `verify` keeps a candidate pair when its similarity reaches
    `threshold`: "exact" = Jaccard of the two documents' shingle sets (reads their texts; precision 1 by
    construction), "estimated" = fraction of equal MinHash rows (cheaper; ~0.83 precision / 0.87 recall at
    0.8 with 14x8, see tests/dedup/test_minhash_quality.py), "none" = every candidate pair. `docs_per_task`
    and `partitions` cut the work and never change the rows."""

    threshold: float = knob(
        0.8, "a candidate pair is a near duplicate when its similarity reaches this (FineWeb's 0.8)"
    )
    verify: Verify = knob("exact", "how candidate pairs are verified: exact | estimated | none")
    n_grams: int = knob(
        MinHashParams().n_grams,
        "words per shingle for verify=exact: must match "
        "dedup/minhash_bands' n_grams (its shingles are what the bands hash)",
    )
    docs_per_task: int = knob(
        1_000_000,
        "documents per candidate task (band-hash ranges per band = documents / this) and per partition of the "
        "later stages: bounds every task's memory (the rows do not depend on it)",
    )
    partitions: int = knob(0, "hash partitions of pairs, labels and rows; 0 = documents / docs_per_task, at least 1")

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {' | '.join(VERIFY_MODES)}, got {self.verify!r}")
        if self.n_grams < 1:
            raise ValueError(f"n_grams must be >= 1, got {self.n_grams}")
        if self.docs_per_task < 1:
            raise ValueError(f"docs_per_task must be >= 1, got {self.docs_per_task}")
        if self.partitions < 0:
            raise ValueError(f"partitions must be >= 0, got {self.partitions}")

    def hashed(self) -> dict:
        """What changes the stored rows (recorded as the snapshot's config hash): not how the work is cut."""
        return {"threshold": self.threshold, "verify": self.verify, "n_grams": self.n_grams}


@dataclass(frozen=True)
class NearDuplicatePlan:
    """Everything the stages need: the pinned inputs, the crawls and their input fingerprints, the first crawl
    to recompute (None: nothing changed), how the work is cut, where scratch files go. Small and picklable:
    every task carries it."""

    lakehouse: Lakehouse
    params: NearDuplicateParams
    snapshot_ids: Mapping[str, int | None]  # of INPUTS and the output table, read once
    run: str
    scratch: str
    fingerprints: Mapping[str, str]
    documents: Mapping[str, int]  # hashed documents per crawl
    first: str | None
    bands: int
    ranges: int
    parts: int

    def snapshot(self, t) -> int | None:
        return self.snapshot_ids[t.identifier]

    def recomputed(self) -> list[str]:
        """The crawls whose rows this run writes."""
        return [] if self.first is None else [c for c in sorted(self.fingerprints) if c >= self.first]

    def scratch_path(self, stage: str, index: int) -> str:
        return f"{self.scratch}/{stage}-{index:05d}.parquet"


@dataclass(frozen=True)
class Task:
    """One task of a stage: its shard (`index`: band-range or partition) and the scratch files it reads."""

    index: int
    plan: NearDuplicatePlan
    inputs: tuple[tuple[str, ...], ...] = ()
    band: int = 0
    step: int = 0  # the propagation round
    source: ScanSlice | None = None  # the data files a scatter task reads


@dataclass(frozen=True)
class Stage:
    """What one stage cost: tasks, wall and CPU seconds, the largest peak RSS of a task's process, bytes of the
    data and scratch files its tasks opened."""

    name: str
    tasks: int
    wall_s: float
    cpu_s: float
    peak_rss_bytes: int
    bytes_read: int


@dataclass(frozen=True)
class NearDuplicateResult:
    """The rows tasks' files, the counts the asset reports, and every stage's cost."""

    rows: tuple[TaskResult, ...]
    stats: Mapping[str, object]
    stages: tuple[Stage, ...] = field(default_factory=tuple)
    scratch_files: tuple[str, ...] = ()


# --- plan ----------------------------------------------------------------------------------------------------


def plan(lakehouse: Lakehouse, params: NearDuplicateParams, run: str) -> NearDuplicatePlan:
    """Pin the inputs, fingerprint every crawl's inputs, find the first crawl to recompute, cut the work."""
    snapshots = lakehouse.snapshot_ids((*INPUTS, DEDUP_NEAR_DUPLICATES))
    fingerprints, documents = crawl_inputs(lakehouse, snapshots)
    first = first_changed(lakehouse, snapshots, params, fingerprints)
    n_docs = sum(documents.values())
    per_task = math.ceil(n_docs / params.docs_per_task) or 1
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
        per_task,
        params.partitions or per_task,
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
    previous = previous_inputs(lakehouse, snapshots, params)
    if previous is None:
        return min(fingerprints, default=None)
    changed = {c for c in set(fingerprints) | set(previous) if fingerprints.get(c) != previous.get(c)}
    return min(changed, default=None)


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
    files = p.lakehouse.slices(DEDUP_MINHASH_BANDS, p.snapshot(DEDUP_MINHASH_BANDS), None, SCATTER_COLUMNS)
    scattered = stage("scatter", scatter_task, [Task(i, p, source=s) for i, s in enumerate(files)])
    band_files = (outputs(scattered, "bands"),)
    cand = stage(
        "candidates",
        candidates_task,
        [Task(b * p.ranges + r, p, band_files, band=b) for b in range(p.bands) for r in range(p.ranges)],
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
    stats = totals(p, pairs, edges, rows, rounds)
    return NearDuplicateResult(tuple(rows), stats, tuple(merge_rounds(stages)), tuple(scratch))


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


# --- the stages' tasks ---------------------------------------------------------------------------------------


SCATTER_COLUMNS = ("doc_id", "crawl", "segment", "band", "band_hash")


def scatter_task(t: Task) -> TaskResult:
    """The band rows of some data files, streamed batch by batch, each to the partition of its (band, band-hash
    range): one read of dedup.minhash_bands in all, where a range filter could not skip anything (every row
    group spans the whole hash range)."""
    p, start = t.plan, task_start()
    writer = PartWriter(fs(p), p.scratch_path("bands", t.index), BAND_ROWS)
    for batch in p.lakehouse.read_slice(t.source):
        h = batch.column("band_hash").to_numpy()
        rows = pa.table(
            {"key": keys(batch.column("crawl"), batch.column("doc_id")), "segment": batch.column("segment"), "h": h}
        )
        writer.write(rows, batch.column("band").to_numpy().astype(np.int64) * p.ranges + range_of(h, p.ranges))
    nbytes = sum(f.file.file_size_in_bytes for f in t.source.files)
    return task_result(t, start, nbytes, bands=writer.close())


def range_of(h: np.ndarray, ranges: int) -> np.ndarray:
    """Which of `ranges` equal ranges of the signed 64-bit space each hash falls in (0 for the smallest)."""
    if ranges == 1:
        return np.zeros(len(h), np.int64)
    shifted = h.astype(np.int64).view(np.uint64) ^ np.uint64(1 << 63)  # order-preserving map to [0, 2^64)
    return np.minimum(shifted // np.uint64((1 << 64) // ranges), np.uint64(ranges - 1)).astype(np.int64)


def candidates_task(t: Task) -> TaskResult:
    """Pairs of documents sharing a hash of band `t.band` within its hash range (of every crawl; only pairs whose
    later document is in a recomputed crawl are kept), partitioned by their first document."""
    p, start = t.plan, task_start()
    rows, nbytes = read_scratch(p, t.inputs[0], t.index, BAND_ROWS)
    table = rows.sort_by([("h", "ascending"), ("key", "ascending")])
    i, j = bucket_pairs(table["h"].to_numpy())
    pairs = pa.table(
        {
            "a": table["key"].take(i),
            "b": table["key"].take(j),
            "a_seg": table["segment"].take(i),
            "b_seg": table["segment"].take(j),
        }
    )
    pairs = pairs.filter(pc.greater_equal(split_keys(pairs["b"])[0], p.first))
    path = write_parts(fs(p), p.scratch_path("candidates", t.index), pairs, partition_of(pairs["a"], p.parts))
    return task_result(t, start, nbytes, pairs=path, candidate_rows=pairs.num_rows)


def bucket_pairs(h: np.ndarray, max_all_pairs: int = MAX_ALL_PAIRS_BUCKET) -> tuple[np.ndarray, np.ndarray]:
    """Row pairs (i, j), i < j, of rows sorted by (hash, key) that share a hash: all pairs of a bucket of at
    most `max_all_pairs` rows, else its first row with each other row (a star)."""
    n = len(h)
    if n < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
    sizes = np.diff(np.r_[starts, n])
    out_i, out_j = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for size in np.unique(sizes[sizes > 1]).tolist():
        first = starts[sizes == size][:, None]
        if size <= max_all_pairs:
            i, j = np.triu_indices(size, k=1)
            out_i.append((first + i).ravel())
            out_j.append((first + j).ravel())
        else:
            out_i.append(np.repeat(first, size - 1, axis=1).ravel())
            out_j.append((first + np.arange(1, size)).ravel())
    return np.concatenate(out_i).astype(np.int64), np.concatenate(out_j).astype(np.int64)


def pairs_task(t: Task) -> TaskResult:
    """The unique candidate pairs of partition `t.index`. With verify="none" they are the edges; otherwise
    they wait for verification and each pair's documents are requested from their segment's partition."""
    p, start = t.plan, task_start()
    cand, nbytes = read_scratch(p, t.inputs[0], t.index, PAIRS)
    pairs = unique(cand, ["a", "b", "a_seg", "b_seg"]).sort_by([("a", "ascending"), ("b", "ascending")])
    if p.params.verify == "none":
        return task_result(t, start, nbytes, candidate_pairs=pairs.num_rows, **write_graph(p, t.index, pairs))
    ends = pa.table(
        {
            "key": pa.concat_arrays([pairs["a"].combine_chunks(), pairs["b"].combine_chunks()]),
            "segment": pa.concat_arrays([pairs["a_seg"].combine_chunks(), pairs["b_seg"].combine_chunks()]),
        }
    )
    ends = unique(ends, ["key", "segment"]).sort_by("key")
    requests = ends.append_column("part", pa.array(np.full(ends.num_rows, t.index, np.int64)))
    io = fs(p)
    return task_result(
        t,
        start,
        nbytes,
        candidate_pairs=pairs.num_rows,
        pairs=write_parts(io, p.scratch_path("pairs", t.index), pairs, np.zeros(pairs.num_rows, np.int64)),
        requests=write_parts(
            io, p.scratch_path("requests", t.index), requests, partition_of(requests["segment"], p.parts)
        ),
    )


def fetch_task(t: Task) -> TaskResult:
    """The texts (verify="exact") or signatures ("estimated") of the documents requested from the segments of
    partition `t.index`, one segment's data files at a time, sent to the pair partitions that asked."""
    p, start = t.plan, task_start()
    requests, nbytes = read_scratch(p, t.inputs[0], t.index, REQUESTS)
    crawls, doc_ids = split_keys(requests["key"])
    requests = requests.append_column("crawl", crawls).append_column("doc_id", doc_ids)
    source, column = feature_source(p.params)
    found = []
    for group in (
        unique(requests, ["crawl", "segment"]).sort_by([("crawl", "ascending"), ("segment", "ascending")]).to_pylist()
    ):
        wanted = requests.filter(
            pc.and_(pc.equal(requests["crawl"], group["crawl"]), pc.equal(requests["segment"], group["segment"]))
        )
        ids = pc.unique(wanted["doc_id"]).to_pylist()
        where = And(EqualTo("crawl", group["crawl"]), And(EqualTo("segment", group["segment"]), In("doc_id", ids)))
        rows, read = read_table(p.lakehouse, source, p.snapshot(source), ("doc_id", column), where)
        nbytes += read
        joined = wanted.select(["doc_id", "key", "part"]).join(rows.rename_columns(["doc_id", "value"]), "doc_id")
        found.append(joined.select(["key", "value", "part"]))
    schema = feature_schema(p.params)
    features = pa.concat_tables(found).cast(schema) if found else schema.empty_table()
    path = write_parts(fs(p), p.scratch_path("features", t.index), features, features["part"].to_numpy())
    return task_result(t, start, nbytes, features=path)


def feature_source(params: NearDuplicateParams):
    """The table and column a pair's similarity is computed from."""
    return (CURATED_DOCUMENTS, "text") if params.verify == "exact" else (DEDUP_MINHASH_SIGNATURES, "signature")


def feature_schema(params: NearDuplicateParams) -> pa.Schema:
    """Rows of the fetch stage: a document's key, its text or signature, the pair partition that asked."""
    source, column = feature_source(params)
    return pa.schema(
        [("key", pa.string()), ("value", small(source.arrow_schema.field(column)).type), ("part", pa.int64())]
    )


def verify_task(t: Task) -> TaskResult:
    """The pairs of partition `t.index` whose similarity reaches the threshold, compared in batches."""
    p, start = t.plan, task_start()
    pairs, nbytes = read_scratch(p, t.inputs[0][t.index : t.index + 1], 0, PAIRS)
    features, read = read_scratch(p, t.inputs[1], t.index, feature_schema(p.params))
    similar = similarity_of(p.params, dict(zip(features["key"].to_pylist(), features["value"].to_pylist())))
    keep = np.zeros(pairs.num_rows, bool)
    for lo in range(0, pairs.num_rows, VERIFY_BATCH):
        batch = pairs.slice(lo, VERIFY_BATCH)
        keep[lo : lo + batch.num_rows] = similar(batch["a"].to_pylist(), batch["b"].to_pylist()) >= p.params.threshold
    edges = pairs.filter(pa.array(keep))
    return task_result(t, start, nbytes + read, verified_pairs=edges.num_rows, **write_graph(p, t.index, edges))


def similarity_of(params: NearDuplicateParams, values: dict) -> Callable[[list, list], np.ndarray]:
    """Pairwise similarity of documents by key: exact Jaccard of shingle sets (each document's set made once)
    or the fraction of equal signature rows (vectorised; an empty signature is similar to nothing)."""
    if params.verify == "exact":
        sets: dict[str, frozenset] = {}

        def shingle_set(k: str) -> frozenset:
            if k not in sets:
                if len(sets) >= MAX_SHINGLE_SETS:  # pairs come sorted by their first document: few are needed again
                    sets.clear()
                sets[k] = frozenset(shingles(values[k] or "", params.n_grams))
            return sets[k]

        return lambda a, b: np.array([exact_jaccard(shingle_set(x), shingle_set(y)) for x, y in zip(a, b)])
    index = {k: i for i, k in enumerate(values)}
    sigs = np.stack([np.frombuffer(v, "<u4") for v in values.values()]) if values else np.empty((0, 0), "<u4")
    empty = np.all(sigs == np.uint32(0xFFFFFFFF), axis=1) if len(sigs) else np.empty(0, bool)

    def estimated(a: list, b: list) -> np.ndarray:
        ia, ib = np.array([index[x] for x in a], np.int64), np.array([index[y] for y in b], np.int64)
        sim = np.count_nonzero(sigs[ia] == sigs[ib], axis=1) / sigs.shape[1] if len(ia) else np.empty(0)
        return np.where(empty[ia] | empty[ib], 0.0, sim)

    return estimated


def write_graph(p: NearDuplicatePlan, index: int, edges: pa.Table) -> dict[str, str]:
    """The edges as labels will travel (partitioned by source): a -> b always, b -> a only within one crawl
    (a later crawl never changes an earlier cluster); and their documents, partitioned by document."""
    a, b = edges["a"].combine_chunks(), edges["b"].combine_chunks()
    same = pc.equal(split_keys(a)[0], split_keys(b)[0])
    adjacency = pa.table({"src": pa.concat_arrays([a, b.filter(same)]), "dst": pa.concat_arrays([b, a.filter(same)])})
    nodes = pa.table(
        {
            "node": pa.concat_arrays([a, b]),
            "segment": pa.concat_arrays([edges["a_seg"].combine_chunks(), edges["b_seg"].combine_chunks()]),
        }
    )
    io = fs(p)
    return {
        "adjacency": write_parts(
            io, p.scratch_path("adjacency", index), adjacency, partition_of(adjacency["src"], p.parts)
        ),
        "nodes": write_parts(io, p.scratch_path("nodes", index), nodes, partition_of(nodes["node"], p.parts)),
    }


def labels_task(t: Task) -> TaskResult:
    """Round 0: the documents of partition `t.index` with their first label (a document of a frozen crawl: its
    stored cluster; any other: itself), and a message along every edge leaving them."""
    p, start = t.plan, task_start()
    nodes, nbytes = read_scratch(p, t.inputs[1], t.index, NODES)
    nodes = unique(nodes, ["node", "segment"]).sort_by("node")
    frozen, read = frozen_labels(p, nodes["node"])
    labels = nodes.append_column("label", pc.coalesce(frozen, nodes["node"]))
    adjacency, read_adj = read_scratch(p, t.inputs[0], t.index, ADJACENCY)
    return send(t, start, nbytes + read + read_adj, labels, adjacency, labels["node"], changed=labels.num_rows)


def frozen_labels(p: NearDuplicatePlan, nodes: pa.ChunkedArray) -> tuple[pa.Array, int]:
    """The stored cluster (as a key) of each node in a crawl before the first recomputed one, null for the
    others: such nodes are the earlier ends of edges into recomputed crawls, and their rows never change."""
    crawls, doc_ids = split_keys(nodes)
    earlier = pc.less(crawls, p.first)
    out = pa.nulls(len(nodes), pa.string())
    ids = pc.unique(doc_ids.filter(earlier)).to_pylist()
    if not ids:
        return out, 0
    where = And(LessThan("crawl", p.first), In("doc_id", ids))
    columns = ("doc_id", "crawl", "cluster_id", "cluster_crawl")
    rows, nbytes = read_table(p.lakehouse, DEDUP_NEAR_DUPLICATES, p.snapshot(DEDUP_NEAR_DUPLICATES), columns, where)
    stored = keys(rows["crawl"], rows["doc_id"])
    label = keys(rows["cluster_crawl"], rows["cluster_id"])
    at = pc.index_in(nodes, value_set=stored)
    return pc.take(label, at), nbytes


def propagate_task(t: Task) -> TaskResult:
    """One round for partition `t.index`: each document takes the smallest label it was sent, if smaller, and
    sends it along its edges."""
    p, start = t.plan, task_start()
    labels, nbytes = read_scratch(p, t.inputs[1][t.index : t.index + 1], 0, LABELS)
    messages, read = read_scratch(p, t.inputs[2], t.index, MESSAGES)
    best = messages.group_by("dst").aggregate([("label", "min")])
    offered = pc.take(best["label_min"], pc.index_in(labels["node"], value_set=best["dst"]))
    smaller = pc.fill_null(pc.less(offered, labels["label"]), False)
    labels = labels.set_column(2, "label", pc.if_else(smaller, offered, labels["label"]))
    adjacency, read_adj = read_scratch(p, t.inputs[0], t.index, ADJACENCY)
    changed = labels["node"].filter(smaller)
    return send(t, start, nbytes + read + read_adj, labels, adjacency, changed, changed=len(changed))


def send(
    t: Task, start: tuple, nbytes: int, labels: pa.Table, adjacency: pa.Table, senders, changed: int
) -> TaskResult:
    """Write the partition's labels, and a message (dst, label) along every edge whose source is a sender."""
    p = t.plan
    out = adjacency.filter(pc.is_in(adjacency["src"], value_set=pa.array(senders, pa.string())))
    label = pc.take(labels["label"], pc.index_in(out["src"], value_set=labels["node"]))
    messages = pa.table({"dst": out["dst"], "label": label})
    io = fs(p)
    return task_result(
        t,
        start,
        nbytes,
        labels=write_parts(
            io, p.scratch_path(f"labels-{t.step}", t.index), labels, np.zeros(labels.num_rows, np.int64)
        ),
        outbox=write_parts(
            io, p.scratch_path(f"messages-{t.step}", t.index), messages, partition_of(messages["dst"], p.parts)
        ),
        changed=changed,
        messages=messages.num_rows,
    )


def regroup_task(t: Task) -> TaskResult:
    """The settled labels of partition `t.index`'s recomputed documents, sent to their cluster's partition."""
    p, start = t.plan, task_start()
    labels, nbytes = read_scratch(p, t.inputs[0][t.index : t.index + 1], 0, LABELS)
    labels = labels.filter(pc.greater_equal(split_keys(labels["node"])[0], p.first))
    path = write_parts(fs(p), p.scratch_path("clusters", t.index), labels, partition_of(labels["label"], p.parts))
    return task_result(t, start, nbytes, clusters=path)


def rows_task(t: Task) -> TaskResult:
    """The rows of the clusters of partition `t.index`: each recomputed document whose cluster had more than one
    member once its crawl was added, with that size; written as data files, one per crawl."""
    p, start = t.plan, task_start()
    nodes, nbytes = read_scratch(p, t.inputs[0], t.index, LABELS)
    base, read = earlier_sizes(p, nodes["label"])
    rows = near_duplicate_rows(nodes, base)
    files, by_crawl = [], Counter()
    for crawl in pc.unique(rows["crawl"]).to_pylist() if rows.num_rows else []:
        part = rows.filter(pc.equal(rows["crawl"], crawl)).sort_by("doc_id")
        writer = FileWriter(p.lakehouse.output(DEDUP_NEAR_DUPLICATES, {"crawl": crawl}, p.run, t.index))
        writer.write(part)
        files.append(writer.close())
        by_crawl[crawl] = int(pc.sum(pc.is_valid(part["decision"])).as_py() or 0)
    clusters = pc.count_distinct(keys(rows["cluster_crawl"], rows["cluster_id"])).as_py() if rows.num_rows else 0
    result = task_result(t, start, nbytes + read, rows=rows.num_rows, by_crawl=dict(by_crawl), clusters=clusters)
    return TaskResult(t.index, tuple(files), result.stats)


def earlier_sizes(p: NearDuplicatePlan, labels: pa.ChunkedArray) -> tuple[dict[str, int], int]:
    """Members, before the first recomputed crawl, of each cluster whose canonical is in a frozen crawl: its
    stored rows, plus the canonical itself when it has no row (it was alone in its crawl)."""
    crawls, doc_ids = split_keys(pc.unique(labels))
    ids = doc_ids.filter(pc.less(crawls, p.first)).to_pylist()
    if not ids:
        return {}, 0
    where = And(LessThan("crawl", p.first), In("cluster_id", ids))
    columns = ("cluster_id", "cluster_crawl", "decision")
    rows, nbytes = read_table(p.lakehouse, DEDUP_NEAR_DUPLICATES, p.snapshot(DEDUP_NEAR_DUPLICATES), columns, where)
    size = Counter(keys(rows["cluster_crawl"], rows["cluster_id"]).to_pylist())
    with_row = set(keys(rows["cluster_crawl"], rows["cluster_id"]).filter(pc.is_null(rows["decision"])).to_pylist())
    earlier = pc.unique(labels.filter(pc.less(split_keys(labels)[0], p.first))).to_pylist()
    return {k: size[k] + (0 if k in with_row else 1) for k in earlier}, nbytes


def near_duplicate_rows(nodes: pa.Table, base: Mapping[str, int]) -> pa.Table:
    """Rows of recomputed documents (node, segment, label = their canonical's key): a cluster's size as of a
    crawl is its members in that crawl and before; rows where it is more than one."""
    order = nodes.sort_by([("label", "ascending"), ("node", "ascending")])
    crawl, doc_id = split_keys(order["node"])
    cluster_crawl, cluster_id = split_keys(order["label"])
    label = order["label"].to_pylist()
    crawls = crawl.to_pylist()
    size = np.zeros(len(label), np.int64)
    start = 0
    for end in range(1, len(label) + 1):  # one cluster at a time: count its members per crawl, cumulatively
        if end < len(label) and label[end] == label[start]:
            continue
        per_crawl = Counter(crawls[start:end])
        running, as_of = base.get(label[start], 0), {}
        for c in sorted(per_crawl):
            running += per_crawl[c]
            as_of[c] = running
        size[start:end] = [as_of[c] for c in crawls[start:end]]
        start = end
    dup = pc.not_equal(order["node"], order["label"])
    rows = pa.table(
        {
            "doc_id": doc_id,
            "crawl": crawl,
            "segment": order["segment"],
            "decision": pc.if_else(dup, pa.scalar(DECISION_NEAR_DUPLICATE), pa.scalar(None, pa.string())),
            "cluster_id": cluster_id,
            "cluster_size": pa.array(size, pa.int32()),
            "duplicate_of": pc.if_else(dup, cluster_id, pa.scalar(None, pa.string())),
            "cluster_crawl": cluster_crawl,
        }
    )
    return rows.filter(pc.greater(rows["cluster_size"], 1))


# --- helpers ---------------------------------------------------------------------------------------------------


def fs(p: NearDuplicatePlan):
    return p.lakehouse.file_io(p.scratch)


def task_start() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def task_result(t: Task, start: tuple[float, float], nbytes: int, **stats) -> TaskResult:
    """A task's stats plus its cost: CPU seconds, wall seconds, the peak RSS of its process, bytes read; the
    scratch files it wrote are listed so the commit can delete them."""
    scratch = [v for v in stats.values() if isinstance(v, str) and v.startswith(t.plan.scratch)]
    return TaskResult(
        t.index,
        (),
        {
            **stats,
            "scratch": scratch,
            "cpu_s": time.process_time() - start[1],
            "wall_s": time.perf_counter() - start[0],
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "bytes_read": nbytes,
        },
    )


def read_table(lakehouse: Lakehouse, t, snapshot_id: int | None, columns: Sequence[str], where) -> tuple[pa.Table, int]:
    """The rows of `t` matching `where` from the data files its statistics do not rule out, and those files'
    bytes."""
    slices = lakehouse.slices(t, snapshot_id, where, columns)
    schema = pa.schema([small(t.arrow_schema.field(c)) for c in columns])
    batches = [b.select(list(columns)).cast(schema) for s in slices for b in lakehouse.read_slice(s)]
    table = pa.Table.from_batches(batches, schema)
    return table, sum(f.file.file_size_in_bytes for s in slices for f in s.files)


def small(f: pa.Field) -> pa.Field:
    """The field with 32-bit offsets (what scratch files and joins use; a task's shard fits them)."""
    kind = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}.get(f.type, f.type)
    return f.with_type(kind)


def read_scratch(p: NearDuplicatePlan, paths: Sequence[str], part: int, schema: pa.Schema) -> tuple[pa.Table, int]:
    table = read_part(fs(p), paths, part, schema)
    return table, table.nbytes


def unique(table: pa.Table, columns: list[str]) -> pa.Table:
    """The distinct rows of `columns`."""
    return table.group_by(columns, use_threads=False).aggregate([]).select(columns)


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
    }
