"""Evaluation items as data, and a segment's kept documents matched against one benchmark as plan -> task ->
commit (one task per slice of curated data files). No Dagster.

`plan` pins the benchmark's items and cuts the segment's kept curated documents into slices; `run_task`
matches its slice against the items' n-gram and near-match indexes (built once per process and reused) and
writes the matches as Parquet data files of `quarantine.matches`; `commit` replaces the (benchmark, segment)
partition in one transaction, files in plan order (document order, then match order), then records the
screening in `quarantine.screenings`.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
from pyiceberg.expressions import And, EqualTo

from assets.knobs import knob
from assets.quarantine.benchmarks import EvalItem
from assets.quarantine.near_match import DEFAULT_THRESHOLD, NearMatchIndex, find_matches
from assets.quarantine.ngrams import DEFAULT_N, NgramIndex, normalise_words
from assets.quarantine.semantic import DEFAULT_LEXICAL, SemanticIndex, lexical_for, threshold_for
from assets.quarantine.semantic import DEFAULT_THRESHOLD as SEMANTIC_THRESHOLD
from iceberg_catalog import CommitResult, FileWriter, Lakehouse, Provenance, ScanSlice, TaskOutput, TaskResult
from iceberg_catalog.schemas import CURATED_DOCUMENTS, QUARANTINE_EVAL_ITEMS, QUARANTINE_MATCHES, QUARANTINE_SCREENINGS

UPSTREAM = (QUARANTINE_EVAL_ITEMS, CURATED_DOCUMENTS)
DECISION_EVAL_CONTAMINATED = "eval_contaminated"
SAMPLE_MATCHES = 30  # matches per partition shown in the asset's metadata
SEMANTIC_EXAMPLES = 5  # semantic matches shown with their document snippet and item
SNIPPET_CHARS = 160


def eval_item_rows(items: Sequence[EvalItem]) -> pa.Table:
    """Rows of quarantine.eval_items: the items with their number of normalised words."""
    return pa.table(
        {
            "benchmark": [i.benchmark for i in items],
            "split": [i.split for i in items],
            "item_id": [i.item_id for i in items],
            "text": [i.text for i in items],
            "n_words": pa.array([len(normalise_words(i.text).words) for i in items], pa.int32()),
        }
    )


@dataclass(frozen=True)
class MatchParams:
    """Knobs of the matching; `files_per_slice` changes nothing in the result."""

    n: int = knob(
        DEFAULT_N,
        "words per n-gram: a document matches an item that shares one normalised word n-gram with it (GPT-3 style, 13)",
    )
    near: bool = knob(
        True,
        "also find near matches: items copied with light edits (case, punctuation, a word or "
        "two substituted) that break every exact n-gram",
    )
    near_threshold: float = knob(
        DEFAULT_THRESHOLD, "a near match needs at least this share of the item's words in order in the document"
    )
    semantic: bool = knob(
        True,
        "also find semantic matches: paraphrased items, as static-embedding neighbours of 32-word document windows",
    )
    semantic_threshold: float = knob(
        SEMANTIC_THRESHOLD,
        "a semantic candidate needs a window whose cosine similarity to the item exceeds the item's level on clean "
        "reference text by at least this much, and is confirmed when the window and its neighbourhood hold enough "
        "of the item's rare words (semantic.DEFAULT_LEXICAL; both measured by bench/semantic_quarantine.py); for a "
        "benchmark without a measured margin of its own, or every benchmark when semantic_per_benchmark is off",
    )
    semantic_per_benchmark: bool = knob(
        True,
        "use the margin and lexical share measured for each shipped benchmark (semantic.BENCHMARK_THRESHOLDS and "
        "BENCHMARK_LEXICAL: GSM8K, MMLU-Redux, HumanEval) instead of semantic_threshold",
    )
    files_per_slice: int = knob(
        1, "curated data files per task: the unit an executor runs (results do not depend on it)"
    )

    def hashed(self) -> dict:
        """What changes the matches (recorded as the snapshot's config hash)."""
        return {
            "n": self.n,
            "near": self.near,
            "near_threshold": self.near_threshold,
            "semantic": self.semantic,
            "semantic_threshold": self.semantic_threshold,
            "semantic_per_benchmark": self.semantic_per_benchmark,
        }


@dataclass(frozen=True)
class ItemsRef:
    """One benchmark's items at a pinned snapshot of quarantine.eval_items."""

    benchmark: str
    snapshot_id: int


@dataclass(frozen=True)
class MatchTask:
    """Match the kept documents of one slice of curated data files against the pinned items."""

    index: int
    lakehouse: Lakehouse
    items: ItemsRef
    docs: ScanSlice
    params: MatchParams
    out: TaskOutput


def partition(benchmark: str, crawl: str, segment: str) -> dict[str, str]:
    return {"benchmark": benchmark, "crawl": crawl, "segment": segment}


# --- the pinned items and their indexes, once per process ----------------------------------------------------


@dataclass(frozen=True)
class PinnedItems:
    ref: ItemsRef
    item_ids: tuple[str, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Indexes:
    item_ids: tuple[str, ...]
    ngram: NgramIndex
    near: NearMatchIndex | None
    semantic: SemanticIndex | None = None
    texts: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        return (
            self.ngram.nbytes + (self.near.nbytes if self.near else 0) + (self.semantic.nbytes if self.semantic else 0)
        )


_CACHE_SIZE = 4
_items: OrderedDict[tuple, PinnedItems] = OrderedDict()
_indexes: OrderedDict[tuple, Indexes] = OrderedDict()


def _remember(cache: OrderedDict, key: tuple, value):
    cache[key] = value
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return value


def pinned_items(lakehouse: Lakehouse, benchmark: str, snapshot_id: int | None) -> PinnedItems:
    """The benchmark's items at the snapshot (cached per process); refuses a benchmark without items."""
    key = (lakehouse.lock_key, benchmark, snapshot_id)
    if key in _items:
        return _items[key]
    items = lakehouse.scan_at(QUARANTINE_EVAL_ITEMS, snapshot_id, ("item_id", "text"), EqualTo("benchmark", benchmark))
    if snapshot_id is None or items.num_rows == 0:
        raise ValueError(
            f"benchmark {benchmark!r} has no items in {QUARANTINE_EVAL_ITEMS.identifier}: materialise "
            f"quarantine/eval_items for partition {benchmark!r} first"
        )
    pinned = PinnedItems(
        ItemsRef(benchmark, snapshot_id), tuple(items["item_id"].to_pylist()), tuple(items["text"].to_pylist())
    )
    return _remember(_items, key, pinned)


def semantic_threshold(benchmark: str, params: MatchParams) -> float:
    """The semantic margin a screening against `benchmark` uses."""
    return (
        threshold_for(benchmark, params.semantic_threshold)
        if params.semantic_per_benchmark
        else params.semantic_threshold
    )


def semantic_lexical(benchmark: str, params: MatchParams) -> float:
    """The lexical share that confirms a semantic candidate in a screening against `benchmark`."""
    return lexical_for(benchmark) if params.semantic_per_benchmark else DEFAULT_LEXICAL


def indexes(lakehouse: Lakehouse, ref: ItemsRef, params: MatchParams) -> tuple[Indexes, bool, float]:
    """The n-gram (and near-match) indexes of the pinned items, built once per process and parameters;
    (indexes, whether this call built them, seconds spent building them here: 0.0 when reused)."""
    key = (lakehouse.lock_key, ref.benchmark, ref.snapshot_id, *params.hashed().values())
    if key in _indexes:
        return _indexes[key], False, 0.0
    t0 = time.perf_counter()
    items = pinned_items(lakehouse, ref.benchmark, ref.snapshot_id)
    built = Indexes(
        items.item_ids,
        NgramIndex.build(items.texts, n=params.n),
        NearMatchIndex.build(items.texts, threshold=params.near_threshold) if params.near else None,
        SemanticIndex.build(
            items.texts,
            threshold=semantic_threshold(ref.benchmark, params),
            lexical=semantic_lexical(ref.benchmark, params),
        )
        if params.semantic
        else None,
        items.texts,
    )
    return _remember(_indexes, key, built), True, time.perf_counter() - t0


# --- plan, task, commit --------------------------------------------------------------------------------------


def plan(
    lakehouse: Lakehouse,
    items: PinnedItems,
    crawl: str,
    segment: str,
    pins: Mapping[str, int | None],
    params: MatchParams,
    run: str,
) -> list[MatchTask]:
    """One task per `params.files_per_slice` data files of the segment's kept curated documents (scan order) at
    the pinned snapshot (`pins`: `lakehouse.snapshot_ids(UPSTREAM)`); `items` from `pinned_items`."""
    kept = And(EqualTo("crawl", crawl), And(EqualTo("segment", segment), EqualTo("kept", True)))
    slices = lakehouse.slices(
        CURATED_DOCUMENTS,
        pins[CURATED_DOCUMENTS.identifier],
        kept,
        ("doc_id", "deletion_key", "text"),
        params.files_per_slice,
    )
    part = partition(items.ref.benchmark, crawl, segment)
    return [
        MatchTask(i, lakehouse, items.ref, s, params, lakehouse.output(QUARANTINE_MATCHES, part, run, i))
        for i, s in enumerate(slices)
    ]


def run_task(task: MatchTask) -> TaskResult:
    """Every item found in each document of the slice, as rows of quarantine.matches in document order, then
    match order. Stats: documents, matches, contaminated doc ids, the first matches, the index build. Never
    commits."""
    idx, index_built, build_seconds = indexes(task.lakehouse, task.items, task.params)
    writer = FileWriter(task.out)
    bench, part = task.items.benchmark, task.out.partition
    n_docs, n_matches, contaminated, sample, kinds, examples = 0, 0, set(), [], Counter(), []
    for batch in task.lakehouse.read_slice(task.docs):
        rows = []
        docs = batch.to_pylist()
        texts = [doc["text"] or "" for doc in docs]
        found = [find_matches(t, idx.ngram, idx.near) for t in texts]
        if idx.semantic is not None:
            semantic = idx.semantic.find_batch(texts, found)
            found = [sorted(f + s, key=lambda m: (m.item_index, m.kind)) for f, s in zip(found, semantic)]
        for doc, text, matches in zip(docs, texts, found):
            n_docs += 1
            for m in matches:
                kinds[m.kind] += 1
                if m.kind == "semantic" and len(examples) < SEMANTIC_EXAMPLES:
                    snippet = text[m.char_start : m.char_end][:SNIPPET_CHARS]
                    item = idx.texts[m.item_index][:SNIPPET_CHARS] if idx.texts else ""
                    examples.append([doc["doc_id"], idx.item_ids[m.item_index], round(m.score, 3), snippet, item])
                rows.append(
                    {
                        "doc_id": doc["doc_id"],
                        "crawl": part["crawl"],
                        "segment": part["segment"],
                        "benchmark": bench,
                        "item_id": idx.item_ids[m.item_index],
                        "kind": m.kind,
                        "overlap_fraction": float(m.score),
                        "char_start": m.char_start,
                        "char_end": m.char_end,
                        "decision": DECISION_EVAL_CONTAMINATED,
                        "deletion_key": doc["deletion_key"],
                    }
                )
        writer.write(pa.Table.from_pylist(rows, schema=QUARANTINE_MATCHES.arrow_schema))
        n_matches += len(rows)
        contaminated.update(r["doc_id"] for r in rows)
        sample += [
            [r["doc_id"], r["item_id"], r["kind"], r["overlap_fraction"], r["char_start"], r["char_end"]]
            for r in rows[: SAMPLE_MATCHES - len(sample)]
        ]
    return TaskResult(
        task.index,
        (writer.close(),),
        {
            "documents": n_docs,
            "matches": n_matches,
            "contaminated": sorted(contaminated),
            "sample": sample,
            "kinds": dict(kinds),
            "semantic_examples": examples,
            "index_built": index_built,
            "index_build_seconds": build_seconds,
            "index_bytes": idx.nbytes,
        },
    )


@dataclass(frozen=True)
class Screening:
    """A (benchmark, segment) screening over every task: the row of quarantine.screenings, summed."""

    documents_checked: int
    contaminated_documents: int
    matches: int
    sample: list[list]  # the first matches, in plan order
    index_build_seconds: float
    index_bytes: int
    kinds: dict[str, int]  # matches per kind (ngram, near, semantic)
    semantic_examples: list[list]  # [doc_id, item_id, score, document snippet, item snippet], plan order

    @classmethod
    def of(cls, results: Sequence[TaskResult]) -> Screening:
        ordered = sorted(results, key=lambda r: r.task_index)
        contaminated = set().union(*(r.stats["contaminated"] for r in ordered))
        sample = [m for r in ordered for m in r.stats["sample"]][:SAMPLE_MATCHES]
        return cls(
            sum(r.stats["documents"] for r in ordered),
            len(contaminated),
            sum(r.stats["matches"] for r in ordered),
            sample,
            sum(r.stats["index_build_seconds"] for r in ordered),
            max((r.stats["index_bytes"] for r in ordered), default=0),
            dict(sum((Counter(r.stats.get("kinds", {})) for r in ordered), Counter())),
            [e for r in ordered for e in r.stats.get("semantic_examples", [])][:SEMANTIC_EXAMPLES],
        )


def commit(
    lakehouse: Lakehouse,
    benchmark: str,
    crawl: str,
    segment: str,
    results: Sequence[TaskResult],
    pins: Mapping[str, int | None],
    provenance: Provenance,
    screened_at: datetime | None = None,
) -> tuple[CommitResult, CommitResult]:
    """Replace the (benchmark, segment) partition of quarantine.matches with the tasks' files (one transaction),
    then record the screening in quarantine.screenings (its own commit). (matches commit, screening commit)"""
    part = partition(benchmark, crawl, segment)
    matches = lakehouse.commit(results, {QUARANTINE_MATCHES: part}, {QUARANTINE_MATCHES: provenance})
    s = Screening.of(results)
    writer = lakehouse.writer(QUARANTINE_SCREENINGS, part)
    writer.write(
        pa.Table.from_pylist(
            [
                {
                    **part,
                    "documents_checked": s.documents_checked,
                    "contaminated_documents": s.contaminated_documents,
                    "matches": s.matches,
                    "eval_items_snapshot_id": pins[QUARANTINE_EVAL_ITEMS.identifier],
                    "curated_snapshot_id": pins[CURATED_DOCUMENTS.identifier],
                    "screened_at": screened_at or datetime.now(UTC),
                    "dagster_run_id": provenance.run_id,
                }
            ],
            schema=QUARANTINE_SCREENINGS.arrow_schema,
        )
    )
    return matches[QUARANTINE_MATCHES], writer.commit(provenance)
