"""A run view candidate's samples as plan -> stages of tasks -> one commit: no process holds every document or
every sample. No Dagster; `store.build_candidate` wires it. The samples, their order, the digest and so the
manifest are exactly those of the one-process selection (`store.eligible_documents` + `mixture.select`).

1. eligible, one task per segment of tokenized.documents (pinned snapshot, the view's tokenizer): exclusions
   from that segment's rows of curated.documents, curated.exact_duplicates, dedup.near_duplicates and
   quarantine.matches (a document's rows there carry its own crawl and segment: its doc_id is content-addressed
   from its record), then each eligible document's component (`component_of`); rows to a scratch file, pool
   totals and exclusion counts as stats. From the summed totals, each component's fill (`mixture.plan_fills`).
2. scatter, one task per segment: every candidate sample (document, repetition) with its sort key
   (`mixture.seeded_key`) to the key range it falls in. Ranges cut the sha256 key space evenly, so range r holds
   a consecutive run of the canonical order. Stats per range: samples of the full passes; per component the
   partial pass's candidates, their tokens and their smallest token count.
   The partial passes, the only global step: ranges whose candidates all fit the budget are taken whole from the
   counts alone; from the first that overflows, candidates (key, n_tokens) are read one range at a time, sorted
   and first-fit (`mixture.first_fit`), skipping ranges whose smallest document no longer fits. The keys taken
   go to one scratch file per range.
3. order, one task per key range: its kept samples sorted by key, numbered from the count of samples in earlier
   ranges, to a scratch file. Then the samples digest, one streamed pass over those files in range order (a
   running sha256: it cannot be split).
4. write (once the manifest names the view), one task per range: its rows as run_view.samples data files;
   `write` commits them in one transaction and deletes the scratch files.
No result depends on `samples_per_task`, the task order or the executor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import And, EqualTo, IsNull, Not

from assets.dedup.shuffle import PartWriter, delete_all, read_part
from assets.run_view.mixture import (
    MIN_DOMAIN_CONFIDENCE,
    Component,
    Fill,
    Realised,
    check_components,
    first_fit,
    plan_fills,
    realise,
    seeded_key,
)
from iceberg_catalog import CommitResult, Lakehouse, Provenance, ScanSlice, TaskOutput, TaskResult
from iceberg_catalog.commit import FileWriter
from iceberg_catalog.run_view_contract import SAMPLE_DIGEST_COLUMNS, update_samples_digest
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    DEDUP_NEAR_DUPLICATES,
    QUARANTINE_MATCHES,
    RUN_VIEW_SAMPLES,
    TOKENIZED_DOCUMENTS,
)

SAMPLE_FIELDS = (
    "doc_id",
    "record_id",
    "deletion_key",
    "crawl",
    "segment",
    "n_tokens",
    "tokens_sha256",
    "language",
    "ppl_bucket",
    "host",
    "domain_class",
    "domain_confidence",  # read for mixture filters (min_domain_confidence); samples do not store it
)
EXCLUSION_REASONS = ("not_kept", "exact_duplicate", "near_duplicate", "eval_contaminated")
SAMPLES_PER_TASK = 500_000  # samples a key-range task sorts: its peak RSS was 899 MiB at ~650k (bench)
IDENTITY = ("doc_id", "record_id", "deletion_key", "crawl", "segment")
_S = pa.string()
ELIGIBLE = pa.schema(
    [*((c, _S) for c in IDENTITY), ("n_tokens", pa.int32()), ("tokens_sha256", _S), ("component", pa.int16())]
)
CANDIDATES = pa.schema(
    [
        ("key", pa.binary()),
        *((c, _S) for c in IDENTITY),
        ("component", pa.int16()),
        ("repetition", pa.int32()),
        ("n_tokens", pa.int32()),
        ("tokens_sha256", _S),
        ("partial", pa.bool_()),
    ]
)
PARTIAL = pa.schema(
    [("key", pa.binary()), ("component", pa.int16()), ("n_tokens", pa.int32()), ("partial", pa.bool_())]
)
TAIL = pa.schema([("key", pa.binary())])
ORDERED = pa.schema(
    [
        ("sample_index", pa.int64()),
        ("doc_id", _S),
        ("repetition", pa.int32()),
        ("n_tokens", pa.int32()),
        ("tokens_sha256", _S),
        *((c, _S) for c in IDENTITY[1:]),
        ("component", _S),
    ]
)
# the columns a task reads of tokenized.documents, with 32-bit offsets (a segment fits them)
DOCUMENTS = pa.schema(
    [
        (f.name, _S if pa.types.is_large_string(f.type) else f.type)
        for f in (TOKENIZED_DOCUMENTS.arrow_schema.field(c) for c in SAMPLE_FIELDS)
    ]
)
Executor = Callable[[Callable, Sequence], list]


@dataclass(frozen=True)
class SelectionPlan:
    """What every task carries: the pinned inputs, the mixture, where scratch files go, how the keys are cut;
    `fills`, `ranges` and `boundary` are set once stage 1 and the partial passes decided them. Small and
    picklable (the segments' data files travel in their own tasks)."""

    lakehouse: Lakehouse
    pinned: Mapping[str, int | None]
    tokenizer_id: str
    components: tuple[Component, ...]
    seed: int
    token_budget: int | None
    scratch: str
    samples_per_task: int = SAMPLES_PER_TASK
    fills: tuple[Fill, ...] = ()
    ranges: int = 1
    boundary: tuple[int, ...] = ()  # per component: the first key range whose partial candidates are not all taken


@dataclass(frozen=True)
class Task:
    """One task: a segment (`source`, stages 1-2) or a key range (`index`, stages 3-4), and its inputs."""

    plan: SelectionPlan
    index: int
    inputs: tuple[str, ...] = ()
    source: ScanSlice | None = None
    tail: str | None = None  # order: the partial-pass keys taken in this range
    offset: int = 0  # order: samples in earlier key ranges
    output: TaskOutput | None = None  # write: where the range's run_view.samples files go


@dataclass(frozen=True)
class Selection:
    """The selected samples, ordered in scratch files (one per key range), and what the manifest says of them."""

    plan: SelectionPlan
    ordered: tuple[str, ...]
    realised: tuple[Realised, ...]
    exclusions: Mapping[str, int]
    samples: Mapping[str, object]  # the manifest's entry: n_samples, n_tokens, n_documents, sha256 (the digest)
    segments: tuple[str, ...]  # crawl/segment of the selected documents
    scratch_files: tuple[str, ...]


def in_process(fn: Callable, tasks: Sequence) -> list:
    """The default executor: every task in this process, in plan order."""
    return [fn(t) for t in tasks]


# --- plan --------------------------------------------------------------------------------------------------------


def plan(
    lakehouse: Lakehouse,
    pinned: Mapping[str, int | None],
    tokenizer_id: str,
    components: Sequence[Component],
    seed: int,
    token_budget: int | None,
    run: str,
    samples_per_task: int = SAMPLES_PER_TASK,
) -> tuple[SelectionPlan, list[ScanSlice]]:
    """The plan and the view's segments of tokenized.documents (one slice of data files each, from the scan
    plan: nothing is read)."""
    check_components(components)
    if samples_per_task < 1:
        raise ValueError(f"samples_per_task must be >= 1, got {samples_per_task}")
    # under data/: an S3 Tables bucket refuses writes elsewhere in a table; the orphan sweep removes what a
    # killed build leaves there
    scratch = f"{lakehouse.table(RUN_VIEW_SAMPLES).location().rstrip('/')}/data/scratch/{run}"
    p = SelectionPlan(
        lakehouse, dict(pinned), tokenizer_id, tuple(components), seed, token_budget, scratch, samples_per_task
    )
    return p, segment_slices(lakehouse, pinned[TOKENIZED_DOCUMENTS.identifier], tokenizer_id)


def segment_slices(lakehouse: Lakehouse, snapshot_id: int | None, tokenizer_id: str) -> list[ScanSlice]:
    """The tokenizer's data files of tokenized.documents at `snapshot_id`, one slice per (crawl, segment)."""
    where = EqualTo("tokenizer_id", tokenizer_id)
    at = [TOKENIZED_DOCUMENTS.partition_by.index(c) for c in ("crawl", "segment")]
    groups: dict[tuple[str, str], list] = {}
    for s in lakehouse.slices(TOKENIZED_DOCUMENTS, snapshot_id, where, SAMPLE_FIELDS, files_per_slice=None):
        for f in s.files:
            groups.setdefault(tuple(str(f.file.partition[i]) for i in at), []).append(f)
    return [
        ScanSlice(TOKENIZED_DOCUMENTS.identifier, snapshot_id, tuple(files), SAMPLE_FIELDS, where)
        for _, files in sorted(groups.items())
    ]


# --- stage 1: eligible documents per segment -------------------------------------------------------------------


def eligible_task(t: Task) -> TaskResult:
    """The segment's eligible documents with their component, its exclusion counts and its pools' totals."""
    p = t.plan
    docs = pa.Table.from_batches(
        [b.select(list(SAMPLE_FIELDS)).cast(DOCUMENTS) for b in p.lakehouse.read_slice(t.source)], DOCUMENTS
    )
    counts, eligible = exclude(p, docs, slice_segment(t.source))
    component = component_of(eligible, p.components)
    keep = component >= 0
    eligible = eligible.select(list(ELIGIBLE.names[:-1])).filter(pa.array(keep))
    component, n = component[keep], eligible.column("n_tokens").to_numpy().astype(np.int64)
    eligible = eligible.append_column("component", pa.array(component)).cast(ELIGIBLE)
    pool_docs = np.bincount(component, minlength=len(p.components))
    pool_tokens = np.zeros(len(p.components), np.int64)
    np.add.at(pool_tokens, component, n)
    path = write_scratch(p, scratch_path(p, "eligible", t.index), eligible)
    stats = {"eligible": path, "exclusions": counts, "pool_documents": pool_docs.tolist()}
    return TaskResult(t.index, (), {**stats, "pool_tokens": pool_tokens.tolist()})


def slice_segment(s: ScanSlice) -> tuple[str, str]:
    """(crawl, segment) of a slice's data files (one partition)."""
    at = [TOKENIZED_DOCUMENTS.partition_by.index(c) for c in ("crawl", "segment")]
    return tuple(str(s.files[0].file.partition[i]) for i in at)


def exclude(p: SelectionPlan, docs: pa.Table, segment: tuple[str, str]) -> tuple[dict[str, int], pa.Table]:
    """Exclusion counts by reason (each document under its first reason, EXCLUSION_REASONS order) and the
    documents left, from this segment's rows of the exclusion tables at their pinned snapshots."""
    where = And(EqualTo("crawl", segment[0]), EqualTo("segment", segment[1]))
    lookups = (
        (CURATED_DOCUMENTS, And(where, EqualTo("kept", True)), True),
        (CURATED_EXACT_DUPLICATES, where, False),
        (DEDUP_NEAR_DUPLICATES, And(where, Not(IsNull("decision"))), False),
        (QUARANTINE_MATCHES, where, False),
    )
    ids = docs.column("doc_id")
    left = np.ones(docs.num_rows, bool)
    counts = {}
    for reason, (table, row_filter, absent) in zip(EXCLUSION_REASONS, lookups, strict=True):
        found = p.lakehouse.scan_at(table, p.pinned[table.identifier], ("doc_id",), row_filter).column("doc_id")
        hit = pc.is_in(ids, value_set=found.combine_chunks().cast(_S)).to_numpy(zero_copy_only=False)
        hit = (~hit if absent else hit) & left
        counts[reason] = int(hit.sum())
        left &= ~hit
    return counts, docs.filter(pa.array(left))


def component_of(docs: pa.Table, components: Sequence[Component]) -> np.ndarray:
    """Per document, the index of the first component it matches (`Component.matches`), -1 for none."""
    out = np.full(docs.num_rows, -1, np.int16)
    for k, c in enumerate(components):
        match = np.ones(docs.num_rows, bool)
        floor = c.min_domain_confidence
        if floor is not None:  # a document without a confidence does not match
            match &= _mask(pc.greater_equal(docs.column("domain_confidence"), floor))
        for col, values in c.filters.items():
            if col != MIN_DOMAIN_CONFIDENCE:  # label columns are strings: other values match nothing
                wanted = pa.array(sorted(v for v in set(values) if isinstance(v, str)), _S)
                match &= _mask(pc.is_in(docs.column(col), value_set=wanted))
        out[(out < 0) & match] = k
    return out


def _mask(values) -> np.ndarray:
    return pc.fill_null(values, False).to_numpy(zero_copy_only=False).astype(bool)


def fills(p: SelectionPlan, results: Sequence[TaskResult]) -> tuple[SelectionPlan, dict[str, int]]:
    """The plan with each component's fill and the key ranges cut, and the exclusion counts, from stage 1."""
    names = [c.name for c in p.components]
    docs = {n: sum(int(r.stats["pool_documents"][k]) for r in results) for k, n in enumerate(names)}
    tokens = {n: sum(int(r.stats["pool_tokens"][k]) for r in results) for k, n in enumerate(names)}
    done = plan_fills(p.components, docs, tokens, p.token_budget)
    expected = sum(f.pool_documents * (f.full + f.partial) for f in done)
    exclusions = {reason: sum(int(r.stats["exclusions"][reason]) for r in results) for reason in EXCLUSION_REASONS}
    return replace(p, fills=tuple(done), ranges=max(1, -(-expected // p.samples_per_task))), exclusions


# --- stage 2: candidate samples to their key ranges ----------------------------------------------------------


def scatter_task(t: Task) -> TaskResult:
    """Every candidate sample of the segment's eligible documents, keyed, to its key range."""
    p, (path,) = t.plan, t.inputs
    eligible = read_scratch(p, path)
    component = eligible.column("component").to_numpy()
    definite = np.zeros(p.ranges, np.int64)
    shape = (len(p.fills), p.ranges)
    count, tokens, least = np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.full(shape, 2**62, np.int64)
    writer = PartWriter(fs(p), scratch_path(p, "candidates", t.index), CANDIDATES)
    for k, f in enumerate(p.fills):
        rows = eligible.filter(pa.array(component == k))
        ids, n = rows.column("doc_id").to_pylist(), rows.column("n_tokens").to_numpy().astype(np.int64)
        for rep in range(f.full + f.partial):
            keys = [seeded_key(p.seed, d, rep) for d in ids]
            parts = key_ranges(keys, p.ranges)
            partial = rep == f.full
            writer.write(candidates(rows, keys, rep, partial), parts)
            if not partial:
                definite += np.bincount(parts, minlength=p.ranges)
                continue
            count[k] += np.bincount(parts, minlength=p.ranges)
            np.add.at(tokens[k], parts, n)
            np.minimum.at(least[k], parts, n)
    stats = {"candidates": writer.close(), "definite": definite.tolist(), "count": count.tolist()}
    return TaskResult(t.index, (), {**stats, "tokens": tokens.tolist(), "least": least.tolist()})


def key_ranges(keys: Sequence[bytes], ranges: int) -> np.ndarray:
    """The key range of each sort key: its first 32 bits scaled to [0, ranges), so ranges follow key order."""
    if not keys:
        return np.zeros(0, np.int64)
    top = np.frombuffer(b"".join(k[:4] for k in keys), ">u4").astype(np.uint64)
    return ((top * np.uint64(ranges)) >> np.uint64(32)).astype(np.int64)


def candidates(rows: pa.Table, keys: Sequence[bytes], rep: int, partial: bool) -> pa.Table:
    """The candidate samples of repetition `rep` of `rows` (eligible documents of one component)."""
    n = rows.num_rows
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            **{c: rows.column(c) for c in IDENTITY},
            "component": rows.column("component"),
            "repetition": pa.array(np.full(n, rep, np.int32)),
            "n_tokens": rows.column("n_tokens"),
            "tokens_sha256": rows.column("tokens_sha256"),
            "partial": pa.array(np.full(n, partial)),
        },
        CANDIDATES,
    )


def partial_passes(p: SelectionPlan, results: Sequence[TaskResult]) -> tuple[SelectionPlan, np.ndarray, dict]:
    """Stage 2's global step: per component the first key range whose partial candidates do not all fit, the
    samples taken per (component, range) and their tokens, and the keys taken per range from that one on."""
    shape = (len(p.fills), p.ranges)
    taken, taken_tokens = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    tails: dict[int, list[bytes]] = {}
    boundary = []
    paths = tuple(r.stats["candidates"] for r in results)
    for k, f in enumerate(p.fills):
        count = sum(np.array(r.stats["count"][k], np.int64) for r in results)
        tokens = sum(np.array(r.stats["tokens"][k], np.int64) for r in results)
        least = np.min([r.stats["least"][k] for r in results], axis=0) if results else np.zeros(p.ranges)
        over = np.flatnonzero(np.cumsum(tokens) > f.remaining) if f.partial else []
        first = int(over[0]) if len(over) else p.ranges
        boundary.append(first)
        taken[k, :first], taken_tokens[k, :first] = count[:first], tokens[:first]
        remaining = f.remaining - int(tokens[:first].sum())  # exact: see mixture.first_fit
        for r in range(first, p.ranges):
            if not count[r] or least[r] > remaining:
                continue
            rows = read_part(fs(p), paths, r, PARTIAL)
            rows = rows.filter(pc.and_(rows.column("partial"), pc.equal(rows.column("component"), k)))
            rows = rows.take(pc.sort_indices(rows.column("key")))
            got, remaining = first_fit(rows.column("n_tokens").to_numpy(), remaining)
            taken[k, r], taken_tokens[k, r] = int(got.sum()), int(rows.column("n_tokens").to_numpy()[got].sum())
            tails.setdefault(r, []).extend(rows.column("key").filter(pa.array(got)).to_pylist())
    return replace(p, boundary=tuple(boundary)), np.stack([taken, taken_tokens]), tails


# --- stage 3: each key range in order --------------------------------------------------------------------------


def order_task(t: Task) -> TaskResult:
    """The range's samples sorted by key and numbered from `offset`, to a scratch file."""
    p = t.plan
    rows = read_part(fs(p), t.inputs, t.index, CANDIDATES)
    late = np.array(p.boundary, np.int64)[rows.column("component").to_numpy()] <= t.index
    drop = rows.column("partial").to_numpy(zero_copy_only=False) & late  # partial candidates past the boundary
    if drop.any():
        tail = read_scratch(p, t.tail).column("key") if t.tail else pa.array([], pa.binary())
        drop &= ~pc.is_in(rows.column("key"), value_set=tail).to_numpy(zero_copy_only=False)
        rows = rows.filter(pa.array(~drop))
    rows = rows.take(pc.sort_indices(rows.column("key")))
    keys = rows.column("key")
    if rows.num_rows > 1:
        same = pc.equal(keys.slice(1), keys.slice(0, rows.num_rows - 1))
        if pc.any(same).as_py():
            at = pc.index(same, True).as_py()
            doc = rows.column("doc_id")[at].as_py()
            raise ValueError(f"{TOKENIZED_DOCUMENTS} holds document {doc} more than once for this tokenizer")
    names = [c.name for c in p.components]
    ordered = pa.table(
        {
            "sample_index": pa.array(np.arange(t.offset, t.offset + rows.num_rows, dtype=np.int64)),
            **{c: rows.column(c) for c in ORDERED.names[1:-1]},
            "component": pa.array([names[k] for k in rows.column("component").to_pylist()], _S),
        },
        ORDERED,
    )
    segments = pc.unique(pc.binary_join_element_wise(rows.column("crawl"), rows.column("segment"), "/"))
    stats = {"ordered": write_scratch(p, scratch_path(p, "ordered", t.index), ordered), "n_samples": rows.num_rows}
    stats["n_tokens"] = int(pc.sum(rows.column("n_tokens")).as_py() or 0)
    stats["n_documents"] = int(pc.sum(pc.equal(rows.column("repetition"), 0)).as_py() or 0)
    return TaskResult(t.index, (), {**stats, "segments": sorted(segments.to_pylist())})


def digest(p: SelectionPlan, paths: Sequence[str]) -> str:
    """`samples_digest` of the ordered files read back in range order, batch by batch."""
    h = hashlib.sha256()
    io = fs(p)
    for path in paths:
        with io.new_input(path).open(seekable=True) as f:
            for batch in pq.ParquetFile(f).iter_batches(columns=list(SAMPLE_DIGEST_COLUMNS)):
                update_samples_digest(h, pa.Table.from_batches([batch]))
    return h.hexdigest()


# --- the stages, then the write --------------------------------------------------------------------------------


def execute(p: SelectionPlan, segments: Sequence[ScanSlice], executor: Executor = in_process) -> Selection:
    """Stages 1-3 and the digest (module doc); the scratch files are deleted if a stage fails."""
    scratch: list[str] = []

    def stage(fn: Callable, tasks: list[Task], *names: str) -> list[TaskResult]:
        results = sorted(executor(fn, tasks), key=lambda r: r.task_index)
        scratch.extend(r.stats[n] for r in results for n in names)
        return results

    try:
        found = stage(eligible_task, [Task(p, i, source=s) for i, s in enumerate(segments)], "eligible")
        p, exclusions = fills(p, found)
        keyed = stage(scatter_task, [Task(p, r.task_index, (r.stats["eligible"],)) for r in found], "candidates")
        p, (taken, taken_tokens), tails = partial_passes(p, keyed)
        for r, keys in sorted(tails.items()):
            scratch.append(
                write_scratch(p, scratch_path(p, "tail", r), pa.table({"key": pa.array(keys, pa.binary())}, TAIL))
            )
        per_range = sum(np.array(r.stats["definite"], np.int64) for r in keyed) + taken.sum(axis=0)
        offsets = np.concatenate([[0], np.cumsum(per_range)[:-1]]).astype(np.int64)
        inputs = tuple(r.stats["candidates"] for r in keyed)
        tasks = [
            Task(p, r, inputs, tail=scratch_path(p, "tail", r) if r in tails else None, offset=int(offsets[r]))
            for r in range(p.ranges)
        ]
        ordered = stage(order_task, tasks, "ordered")
        files = tuple(r.stats["ordered"] for r in ordered)
        realised = realise(
            p.fills,
            [f.full * f.pool_documents + int(taken[k].sum()) for k, f in enumerate(p.fills)],
            [f.full * f.pool_tokens + int(taken_tokens[k].sum()) for k, f in enumerate(p.fills)],
            [f.full + bool(taken[k].sum()) for k, f in enumerate(p.fills)],
        )
        samples = {k: sum(int(r.stats[k]) for r in ordered) for k in ("n_samples", "n_tokens", "n_documents")}
        samples["sha256"] = digest(p, files)
        segments = tuple(sorted({s for r in ordered for s in r.stats["segments"]}))
        return Selection(p, files, tuple(realised), exclusions, samples, segments, tuple(scratch))
    except BaseException:
        discard(p, scratch)
        raise


def write_task(t: Task) -> TaskResult:
    """One key range's ordered samples as data files of the view's run_view.samples partition."""
    p, (path,) = t.plan, t.inputs
    view = t.output.partition["run_view_id"]
    writer = FileWriter(t.output)
    with fs(p).new_input(path).open(seekable=True) as f:
        for batch in pq.ParquetFile(f).iter_batches():
            n = batch.num_rows
            constant = {"run_view_id": pa.array([view] * n, _S), "tokenizer_id": pa.array([p.tokenizer_id] * n, _S)}
            table = pa.Table.from_batches([batch])
            writer.write(
                table.append_column("run_view_id", constant["run_view_id"]).append_column(
                    "tokenizer_id", constant["tokenizer_id"]
                )
            )
    written = writer.close()
    return TaskResult(t.index, (written,), {"rows": written.rows})


def write(
    s: Selection, run_view_id: str, provenance: Provenance, executor: Executor = in_process, run: str = "samples"
) -> CommitResult:
    """Stage 4: the view's run_view.samples partition from the ordered files, ONE transaction; then the scratch
    files are deleted."""
    p = s.plan
    partition = {"run_view_id": run_view_id}
    tasks = [
        Task(p, r, (path,), output=p.lakehouse.output(RUN_VIEW_SAMPLES, partition, run, r))
        for r, path in enumerate(s.ordered)
    ]
    results = executor(write_task, tasks)
    done = p.lakehouse.commit_partitions(RUN_VIEW_SAMPLES, [partition], results, provenance)
    discard(p, s.scratch_files)
    return done


# --- scratch files ---------------------------------------------------------------------------------------------


def scratch_path(p: SelectionPlan, stage: str, index: int) -> str:
    """Named by stage and task: a retried task overwrites what a killed attempt left."""
    return f"{p.scratch}/{stage}-{index:05d}.parquet"


def fs(p: SelectionPlan):
    """The FileIO of the scratch folder."""
    return p.lakehouse.file_io(p.scratch)


def write_scratch(p: SelectionPlan, path: str, table: pa.Table) -> str:
    """`table` as the scratch file `path` (replaced: a retried task overwrites what a killed attempt left)."""
    with fs(p).new_output(path).create(overwrite=True) as out:
        pq.write_table(table, out)
    return path


def read_scratch(p: SelectionPlan, path: str) -> pa.Table:
    """A whole scratch file (one segment's eligible documents, or one range's taken keys)."""
    with fs(p).new_input(path).open(seekable=True) as f:
        return pq.read_table(f)


def discard(p: SelectionPlan, paths: Sequence[str]) -> None:
    """Delete a build's scratch files (after the commit, or when the view already exists or a stage failed)."""
    delete_all(fs(p), paths)
