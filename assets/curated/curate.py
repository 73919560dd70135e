"""curated.documents as plan -> task -> commit (two maps, one commit), and the exact duplicates. No Dagster.

`plan` cuts the segment's partition of raw.warc_records, pinned at one snapshot, into slices of data files in
scan order; `run_task` curates the HTML records of its slice into staged files (every column but
`ppl_bucket`) and returns each document's (language, perplexity); `cutoffs` takes the per-language
percentiles over the whole partition; `bucket_plan` / `run_bucket_task` rewrite each staged file with its
bucket into the final data files; `commit` replaces the partition in one transaction, then deletes the staged
files. Rows keep the raw scan order whatever the tasks' grouping or the order they finished in.

Exact duplicates run the same way over every partition: `exact_scope` picks the crawls to recompute (from the
first whose curated.documents files changed since the last run on: a row depends only on crawls up to its own),
`exact_plan` cuts the text-hash space into contiguous ranges, `run_exact_task` reads only its range's rows
(pinned snapshot, every crawl) and writes the duplicates of the recomputed crawls into their partitions' files,
and `commit_exact_duplicates` replaces exactly those crawls' partitions in one transaction.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    IsNull,
    LessThan,
    Or,
)

from assets.curated.perplexity import language_bucket, language_thresholds
from assets.curated.pipeline import RAW_COLUMNS, CurateParams, curate_records, funnel, is_html
from assets.knobs import knob
from iceberg_catalog import (
    CommitResult,
    FileWriter,
    Lakehouse,
    Provenance,
    ScanSlice,
    TaskOutput,
    TaskResult,
    WrittenFiles,
)
from iceberg_catalog.lakehouse import first_changed_crawl
from iceberg_catalog.schemas import CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES, RAW_WARC_RECORDS

SCHEMA = CURATED_DOCUMENTS.arrow_schema
# Rows are staged in Arrow tables of this many rows (one Parquet row group each): one per curate chunk (32
# rows) cost ~0.4 ms of CPU a document in Arrow and Parquet overheads, 1,024 about a fifth of that. The final
# files do not depend on it: the bucket task reads the staged rows back in batches of 1,024 whatever their
# row groups.
STAGED_BATCH_ROWS = 1024
Thresholds = Mapping[str | None, tuple[float, float]]  # language -> (p_head, p_tail)


def partition(crawl: str, segment: str) -> dict[str, str]:
    return {"crawl": crawl, "segment": segment}


# ---- map 1: curate a slice of raw records into staged files ------------------------------------------------


@dataclass(frozen=True)
class CurateTask:
    """Curate the HTML records of `slice` (raw data files at a pinned snapshot) into `staged`."""

    index: int
    lakehouse: Lakehouse
    slice: ScanSlice
    params: CurateParams
    lm_path: str
    staged: TaskOutput


def plan(
    lakehouse: Lakehouse,
    raw_snapshot_id: int | None,
    crawl: str,
    segment: str,
    params: CurateParams,
    lm_path: str,
    run: str,
) -> list[CurateTask]:
    """One task per `params.files_per_slice` raw data files of the segment at `raw_snapshot_id`, in scan order
    (none when raw was never written: the commit then leaves an empty partition)."""
    where = And(EqualTo("crawl", crawl), EqualTo("segment", segment))
    slices = lakehouse.slices(RAW_WARC_RECORDS, raw_snapshot_id, where, RAW_COLUMNS, params.files_per_slice)
    part = partition(crawl, segment)
    return [
        CurateTask(i, lakehouse, s, params, lm_path, lakehouse.output(CURATED_DOCUMENTS, part, f"{run}-staged", i))
        for i, s in enumerate(slices)
    ]


def _html_chunks(batches: Iterable[pa.RecordBatch], chunk_docs: int, counts: Counter) -> Iterator[list[dict]]:
    """Chunks of HTML records (as dicts) in scan order, counting responses and HTML records."""
    chunk: list[dict] = []
    for batch in batches:
        for rec in batch.to_pylist():
            counts["responses"] += 1
            if not is_html(rec["content_type"]):
                continue
            counts["html"] += 1
            chunk.append(rec)
            if len(chunk) >= chunk_docs:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def run_task(task: CurateTask) -> TaskResult:
    """Curate the slice's HTML records in scan order into staged files (`ppl_bucket` still empty). Stats:
    responses and HTML records read, documents per decision, per language and per quality rules (documents,
    kept), and every scored document's [language, perplexity] for the partition's bucket cut-offs. Never
    commits; safe to retry."""
    counts: Counter = Counter()
    decisions: Counter = Counter()
    languages: Counter = Counter()
    rules: Counter = Counter()
    scored: list[tuple[str | None, float]] = []
    writer = FileWriter(task.staged)
    chunks = _html_chunks(task.lakehouse.read_slice(task.slice), task.params.chunk_docs, counts)
    pending: list[dict] = []
    for rows in curate_records(chunks, task.params, task.lm_path):
        pending.extend(rows)
        if len(pending) >= STAGED_BATCH_ROWS:
            writer.write(pa.Table.from_pylist(pending, schema=SCHEMA))
            pending = []
        for r in rows:
            decisions[r["decision"] or "kept"] += 1
            if r["language"]:
                languages[r["language"]] += 1
            if r["quality_rules"]:
                rules[(r["quality_rules"], bool(r["kept"]))] += 1
            if r["perplexity"] is not None:
                scored.append((r["language"], r["perplexity"]))
    if pending:
        writer.write(pa.Table.from_pylist(pending, schema=SCHEMA))
    return TaskResult(
        task.index,
        (writer.close(),),
        {
            "responses": counts["responses"],
            "html": counts["html"],
            "decisions": dict(decisions),
            "languages": dict(languages),
            "quality_rules": [[name, kept, n] for (name, kept), n in sorted(rules.items())],
            "perplexities": scored,
        },
    )


# ---- between the maps: the partition's per-language cut-offs ----------------------------------------------


def cutoffs(staged: Sequence[TaskResult], params: CurateParams) -> dict[str | None, tuple[float, float]]:
    """Per language, (p_head, p_tail) over every scored document of the partition (order-independent)."""
    pairs = ((lang, ppl) for r in staged for lang, ppl in r.stats["perplexities"])
    return language_thresholds(pairs, params.ppl_head_pct, params.ppl_tail_pct)


# ---- map 2: staged files + bucket -> final data files ------------------------------------------------------


@dataclass(frozen=True)
class BucketTask:
    """Rewrite the staged files of curate task `index` with `ppl_bucket` set into `out`."""

    index: int
    lakehouse: Lakehouse
    staged: tuple[str, ...]
    thresholds: Thresholds
    out: TaskOutput


def staged_paths(result: TaskResult) -> tuple[str, ...]:
    return tuple(p for w in result.files for p in w.paths)


def bucket_plan(
    lakehouse: Lakehouse, crawl: str, segment: str, staged: Sequence[TaskResult], thresholds: Thresholds, run: str
) -> list[BucketTask]:
    """One task per curate task that wrote rows, with the same index (so the same place in the partition)."""
    part = partition(crawl, segment)
    return [
        BucketTask(
            r.task_index,
            lakehouse,
            staged_paths(r),
            thresholds,
            lakehouse.output(CURATED_DOCUMENTS, part, run, r.task_index),
        )
        for r in sorted(staged, key=lambda r: r.task_index)
        if staged_paths(r)
    ]


def run_bucket_task(task: BucketTask) -> TaskResult:
    """Set each row's bucket against its language's cut-offs; rows keep their order. Never commits."""
    writer = FileWriter(task.out)
    io = task.lakehouse.file_io(task.out.location)
    bucket_field = SCHEMA.field("ppl_bucket")
    for path in task.staged:
        with io.new_input(path).open() as fh:
            for batch in pq.ParquetFile(fh).iter_batches(batch_size=1024):
                table = pa.Table.from_batches([batch])
                buckets = [
                    language_bucket(lang, ppl, task.thresholds)
                    for lang, ppl in zip(table["language"].to_pylist(), table["perplexity"].to_pylist())
                ]
                table = table.set_column(
                    table.schema.get_field_index("ppl_bucket"), bucket_field, pa.array(buckets, bucket_field.type)
                )
                writer.write(table)
    return TaskResult(task.index, (writer.close(),))


# ---- commit ------------------------------------------------------------------------------------------------


def commit(
    lakehouse: Lakehouse,
    crawl: str,
    segment: str,
    staged: Sequence[TaskResult],
    results: Sequence[TaskResult],
    provenance: Provenance,
) -> CommitResult:
    """Replace the segment's partition of curated.documents with the bucket tasks' files in task order (ONE
    transaction), then delete the staged files (a failed run leaves them to the orphan sweep)."""
    part = partition(crawl, segment)
    done = lakehouse.commit(results, {CURATED_DOCUMENTS: part}, {CURATED_DOCUMENTS: provenance})[CURATED_DOCUMENTS]
    io = lakehouse.file_io()
    for r in staged:
        for path in staged_paths(r):
            io.delete(path)
    return done


@dataclass
class PartitionStats:
    """What the curate tasks of one partition counted, aggregated independently of task order."""

    responses: int = 0
    html: int = 0
    decisions: Counter = field(default_factory=Counter)  # "kept" for kept documents
    languages: Counter = field(default_factory=Counter)
    quality_rules: Counter = field(default_factory=Counter)  # (rules, kept) -> documents
    perplexities: list[float] = field(default_factory=list)  # sorted

    @classmethod
    def of(cls, staged: Sequence[TaskResult]) -> PartitionStats:
        out = cls()
        for r in staged:
            out.responses += r.stats["responses"]
            out.html += r.stats["html"]
            out.decisions.update(r.stats["decisions"])
            out.languages.update(r.stats["languages"])
            out.quality_rules.update({(name, kept): n for name, kept, n in r.stats.get("quality_rules", ())})
            out.perplexities.extend(ppl for _, ppl in r.stats["perplexities"])
        out.perplexities.sort()
        return out

    @property
    def rows(self) -> int:
        return sum(self.decisions.values())

    @property
    def kept(self) -> int:
        return self.decisions["kept"]

    def funnel(self) -> list[tuple[str, int]]:
        return funnel(self.decisions.elements())


# ---- exact duplicates over every partition, as tasks on hash ranges ----------------------------------------

EXACT_DEDUP_CONFIG = {"key": "text_sha256", "order": "crawl,doc_id"}  # what the rows depend on (config hash)
EXACT_COLUMNS = ("doc_id", "crawl", "segment", "text_sha256", "kept", "decision")
DUPLICATE_COLUMNS = ("doc_id", "crawl", "segment", "decision", "duplicate_of", "duplicate_of_crawl", "text_sha256")
# Shard bounds are this many hex digits of the hash: 2**32 ranges is far more shards than any run asks for.
BOUND_DIGITS = 8
# The snapshot property (Provenance extra) in which curated.exact_duplicates records, per crawl, the fingerprint
# of the curated.documents files its rows were computed from: the next run compares them to find what changed.
CRAWL_FINGERPRINTS = "documents-crawl-fingerprints"


@dataclass(frozen=True)
class ExactDedupParams:
    """How the exact-duplicate step is cut into tasks; the rows never depend on it."""

    shards: int = knob(16, "tasks, each over a contiguous range of text hashes (results do not depend on it)")

    def hashed(self) -> dict:
        """What changes the stored rows (the config hash): the key and the order, not the shard count, so the
        config hash is the one the single-process step recorded."""
        return dict(EXACT_DEDUP_CONFIG)


@dataclass(frozen=True)
class ExactDedupTask:
    """The documents whose text_sha256 is in [lo, hi) (None: unbounded) at a pinned snapshot, of every crawl
    (earlier crawls hold the canonicals); the duplicate rows of the crawls in `outputs` go to their partition's
    output. Shard 0 also reads the documents without a text hash, so every decision is counted by one task."""

    index: int
    lakehouse: Lakehouse
    snapshot_id: int | None
    lo: str | None
    hi: str | None
    outputs: Mapping[str, TaskOutput] = field(default_factory=dict)  # crawl -> where its rows go


def hash_bounds(shards: int) -> list[str | None]:
    """`shards` + 1 bounds cutting the lowercase-hex hash space into contiguous ranges, None at both ends.
    Hex digits sort the same as strings and as numbers, so the ranges in order are the global hash order."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    space = 16**BOUND_DIGITS
    inner = [f"{i * space // shards:0{BOUND_DIGITS}x}" for i in range(1, shards)]
    return [None, *inner, None]


def crawl_fingerprints(lakehouse: Lakehouse, documents_snapshot_id: int | None) -> dict[str, str]:
    """Per crawl, the fingerprint of its curated.documents files at the snapshot (`Lakehouse.crawl_fingerprints`)."""
    return lakehouse.crawl_fingerprints({CURATED_DOCUMENTS: documents_snapshot_id})


def fingerprint_stamp(fingerprints: Mapping[str, str]) -> dict[str, str]:
    """The snapshot property recording the fingerprints a run computed its rows from."""
    return {CRAWL_FINGERPRINTS: json.dumps(dict(fingerprints), sort_keys=True)}


def recorded_fingerprints(summary: Mapping[str, str], provenance: Provenance) -> dict[str, str] | None:
    """The fingerprints the table's last snapshot recorded, or None when its rows cannot be reused: no
    snapshot or a snapshot that wrote none (a deletion), another config hash or another code version."""
    props = Provenance.from_snapshot_summary(summary)
    same = (props.get("config-hash"), props.get("code-version")) == (provenance.config_hash, provenance.code_version)
    return json.loads(props[CRAWL_FINGERPRINTS]) if same and CRAWL_FINGERPRINTS in props else None


def crawls_to_recompute(
    recorded: Mapping[str, str] | None, current: Mapping[str, str], stored: Iterable[str]
) -> list[str]:
    """The crawls whose partitions a run replaces: every crawl (stored or current) from the first changed one
    (`first_changed_crawl`) on; none when nothing changed."""
    first = first_changed_crawl(recorded, current, stored)
    return [] if first is None else sorted(c for c in {*current, *stored} if c >= first)


def exact_scope(lakehouse: Lakehouse, fingerprints: Mapping[str, str], provenance: Provenance) -> list[str]:
    """The crawls this run recomputes, against what the table's current snapshot recorded."""
    snap = lakehouse.table(CURATED_EXACT_DUPLICATES).current_snapshot()
    summary = snap.summary.additional_properties if snap and snap.summary else {}
    return crawls_to_recompute(
        recorded_fingerprints(summary, provenance),
        fingerprints,
        lakehouse.stored_crawls(CURATED_EXACT_DUPLICATES, lakehouse.snapshot_id(CURATED_EXACT_DUPLICATES)),
    )


def exact_plan(
    lakehouse: Lakehouse,
    documents_snapshot_id: int | None,
    params: ExactDedupParams,
    crawls: Sequence[str],
    run: str,
) -> list[ExactDedupTask]:
    """One task per hash range, in hash order, each writing its duplicates of `crawls` (the recomputed ones)."""
    bounds = hash_bounds(params.shards)
    outputs = {c: lakehouse.output(CURATED_EXACT_DUPLICATES, {"crawl": c}, run, 0) for c in crawls}
    return [
        ExactDedupTask(
            i, lakehouse, documents_snapshot_id, lo, hi, {c: replace(o, task_index=i) for c, o in outputs.items()}
        )
        for i, (lo, hi) in enumerate(pairwise(bounds))
    ]


def shard_filter(task: ExactDedupTask) -> BooleanExpression:
    """The task's rows: its hash range (pruned by the files' statistics); shard 0 adds the rows without text."""
    where: BooleanExpression = AlwaysTrue()
    if task.lo is not None:
        where = And(where, GreaterThanOrEqual("text_sha256", task.lo))
    if task.hi is not None:
        where = And(where, LessThan("text_sha256", task.hi))
    return Or(where, IsNull("text_sha256")) if task.index == 0 else where


def run_exact_task(task: ExactDedupTask) -> TaskResult:
    """Stream the range's rows of every crawl, count every decision, decide the kept rows (sorted by hash,
    crawl, doc_id) and write the duplicates of the task's crawls to their partitions' data files. Stats: kept
    documents, duplicates of every crawl (for the funnel), decisions, and the bytes of the data files its scan
    plan read (whole files: an upper bound, only the EXACT_COLUMNS chunks are fetched). Holds only its shard;
    never commits."""
    decisions: Counter = Counter()
    kept: list[pa.Table] = []
    where = shard_filter(task)
    slices = task.lakehouse.slices(CURATED_DOCUMENTS, task.snapshot_id, where, EXACT_COLUMNS, files_per_slice=None)
    for batch in (b for s in slices for b in task.lakehouse.read_slice(s)):
        decisions.update(d or "kept" for d in batch.column("decision").to_pylist())
        rows = pa.Table.from_batches([batch]).filter(pc.field("kept"))
        kept.append(rows.select(["doc_id", "crawl", "segment", "text_sha256"]))
    docs = pa.concat_tables(kept) if kept else _no_documents()
    rows = exact_duplicate_rows(docs)
    files = tuple(_write_crawl(rows, crawl, out) for crawl, out in sorted(task.outputs.items()))
    stats = {
        "kept": docs.num_rows,
        "duplicates": rows.num_rows,
        "decisions": dict(decisions),
        "bytes_scanned": sum(f.file.file_size_in_bytes for s in slices for f in s.files),
    }
    return TaskResult(task.index, files, stats)


def _write_crawl(rows: pa.Table, crawl: str, out: TaskOutput) -> WrittenFiles:
    """The rows of one crawl, in their order, into that crawl's partition (no file when there are none)."""
    writer = FileWriter(out)
    writer.write(rows.filter(pc.field("crawl") == crawl))
    return writer.close()


@dataclass(frozen=True)
class ExactDuplicates:
    """What the tasks counted: duplicates (every crawl, recomputed or not), the kept documents they were found
    among, the documents per decision, the rows written (recomputed crawls) and the bytes scanned."""

    duplicates: int
    kept: int
    decisions: Counter
    written: int
    bytes_scanned: int

    @classmethod
    def of(cls, results: Sequence[TaskResult]) -> ExactDuplicates:
        """Sums over the tasks, whatever order they finished in."""
        decisions: Counter = Counter()
        for r in results:
            decisions.update(r.stats["decisions"])
        return cls(
            sum(r.stats["duplicates"] for r in results),
            sum(r.stats["kept"] for r in results),
            decisions,
            sum(w.rows for r in results for w in r.files),
            sum(r.stats["bytes_scanned"] for r in results),
        )

    def funnel(self) -> list[tuple[str, int]]:
        """Every partition's funnel with exact duplicates taken out of `kept`."""
        full = [(d, n) for d, n in funnel(self.decisions.elements()) if d != "kept"]
        return full + [("exact_duplicate", self.duplicates), ("kept", self.kept - self.duplicates)]


def _string_table(columns: Mapping[str, list]) -> pa.Table:
    return pa.table({k: pa.array(v, pa.string()) for k, v in columns.items()})


def _no_documents() -> pa.Table:
    return _string_table({k: [] for k in ("doc_id", "crawl", "segment", "text_sha256")})


def exact_duplicate_rows(docs: pa.Table) -> pa.Table:
    """For kept documents (doc_id, crawl, segment, text_sha256): every non-first occurrence of a text hash,
    first = smallest (crawl, doc_id), with the canonical document it duplicates."""
    ordered = docs.sort_by([("text_sha256", "ascending"), ("crawl", "ascending"), ("doc_id", "ascending")])
    cols = {k: ordered[k].to_pylist() for k in ("doc_id", "crawl", "segment", "text_sha256")}
    out: dict[str, list] = {k: [] for k in DUPLICATE_COLUMNS}
    first = 0
    for i, digest in enumerate(cols["text_sha256"]):
        if i == 0 or digest != cols["text_sha256"][first]:
            first = i
            continue
        for k in ("doc_id", "crawl", "segment", "text_sha256"):
            out[k].append(cols[k][i])
        out["decision"].append("exact_duplicate")
        out["duplicate_of"].append(cols["doc_id"][first])
        out["duplicate_of_crawl"].append(cols["crawl"][first])
    return _string_table(out)


def commit_exact_duplicates(
    lakehouse: Lakehouse, results: Sequence[TaskResult], crawls: Sequence[str], provenance: Provenance
) -> CommitResult:
    """Replace the partitions of `crawls` in curated.exact_duplicates with every task's files in task order (ONE
    transaction); the other crawls' files stay as they are."""
    parts = [{"crawl": c} for c in crawls]
    return lakehouse.commit_partitions(CURATED_EXACT_DUPLICATES, parts, results, provenance)
