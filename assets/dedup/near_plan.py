"""What every near-dedup task carries and how it reads, writes and reports: the parameters, the plan (pinned
inputs, crawls to recompute, how the work is cut), a task, the scratch-file schemas between stages, and the
plumbing each task shares (scratch paths, reads of pinned tables, its cost). No Dagster; the step is
`assets.dedup.near`."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from assets.dedup.minhash import MinHashParams
from assets.dedup.shuffle import Matcher, read_part
from assets.knobs import knob
from iceberg_catalog import Lakehouse, ScanSlice, TaskResult
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    DEDUP_MINHASH_BANDS,
    DEDUP_MINHASH_SIGNATURES,
)

DECISION_NEAR_DUPLICATE = "near_duplicate"
INPUTS = (DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES, CURATED_DOCUMENTS)
Verify = Literal["exact", "estimated", "none"]
VERIFY_MODES: tuple[str, ...] = get_args(Verify)
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
    0.8 with 14x8, see tests/dedup/test_minhash_quality.py), "none" = every candidate pair. `docs_per_task`,
    `docs_per_partition` and `partitions` cut the work and never change the rows."""

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
        "recomputed documents per candidate task (band-hash ranges per band = documents of the recomputed crawls "
        "/ this): bounds a candidate task's memory (the rows do not depend on it)",
    )
    docs_per_partition: int = knob(
        250_000,
        "recomputed documents per hash partition of the later stages (pairs, verify, components, rows): bounds "
        "their tasks' memory (the rows do not depend on it)",
    )
    partitions: int = knob(
        0, "hash partitions of pairs, labels and rows; 0 = recomputed documents / docs_per_partition, at least 1"
    )

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {' | '.join(VERIFY_MODES)}, got {self.verify!r}")
        if self.n_grams < 1:
            raise ValueError(f"n_grams must be >= 1, got {self.n_grams}")
        for name in ("docs_per_task", "docs_per_partition"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
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
    filter_words: int = 0  # a scatter task of an added crawl: the size of the band-hash filter it builds


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


def read_matching(
    lakehouse: Lakehouse, t, snapshot_id: int | None, columns: Sequence[str], where, key: str, values: pa.Array
) -> tuple[pa.Table, int]:
    """The rows of `t` matching `where` whose column `key` holds one of `values`, and the bytes of the data files
    read (`iter_matching`, gathered)."""
    batches, nbytes = iter_matching(lakehouse, t, snapshot_id, columns, where, key, values)
    schema = pa.schema([small(t.arrow_schema.field(c)) for c in columns])
    return pa.Table.from_batches(list(batches), schema), nbytes


def iter_matching(
    lakehouse: Lakehouse, t, snapshot_id: int | None, columns: Sequence[str], where, key: str, values: pa.Array
) -> tuple[Iterator[pa.RecordBatch], int]:
    """The matching rows of `read_matching` a data-file batch at a time (a caller that streams them on holds one
    batch), and the bytes of the data files they come from (`iter_found`)."""
    batches, nbytes = iter_found(lakehouse, t, snapshot_id, columns, where, key, Matcher(pc.unique(values)))
    return (batch for batch, _ in batches), nbytes


def iter_found(
    lakehouse: Lakehouse, t, snapshot_id: int | None, columns: Sequence[str], where, key: str, wanted: Matcher
) -> tuple[Iterator[tuple[pa.RecordBatch, np.ndarray]], int]:
    """The rows of `t` matching `where` whose column `key` is in `wanted`, a data-file batch at a time with each
    row's position in `wanted.values`, and the bytes of the data files they come from. `where` (crawl, segment)
    prunes files by their statistics; the values are matched batch by batch (`shuffle.Matcher`). A pyiceberg `In`
    over a long list (every requested document of a segment) is bound and pushed down into Arrow's row-group
    statistics; the tasks that used it were the 8M bench's largest (fetch, 2.7 GiB) and the 8M + 1M incremental
    run's costliest (labels, 173 of 388 CPU s)."""
    slices = lakehouse.slices(t, snapshot_id, where, columns)
    schema = pa.schema([small(t.arrow_schema.field(c)) for c in columns])

    def batches() -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
        for s in slices:
            for batch in lakehouse.read_slice(s):
                batch = batch.select(list(columns)).cast(schema)
                rows, positions = wanted.find(batch.column(key))
                yield batch.take(pa.array(rows)), positions

    return batches(), sum(f.file.file_size_in_bytes for s in slices for f in s.files)


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
