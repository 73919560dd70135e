"""Kept documents as token arrays, as plan -> task -> commit (one task per slice of curated data files), and
the check of stored rows. No Dagster.

`plan` reads the pinned exact and near duplicates of the segment once and cuts the segment's kept curated
documents into slices; `run_task` encodes its slice (dropping the duplicates) into Parquet data files of
`tokenized.documents`; `commit` replaces the (tokenizer, segment) partition in one transaction, with the files
in plan order, so rows keep the curated partition's order whatever ran first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, And, BooleanExpression, EqualTo, In, IsNull, Not

from assets.knobs import knob
from assets.tokenized.tokens import (
    LoadedTokenizer,
    check_rows,
    encode_documents,
    load_tokenizer,
    tokenizer_from_json,
    tokens_checksum,
)
from iceberg_catalog import CommitResult, FileWriter, Lakehouse, Provenance, ScanSlice, TaskOutput, TaskResult
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    DEDUP_NEAR_DUPLICATES,
    TOKENIZED_DOCUMENTS,
    TOKENIZED_TOKENIZERS,
)

UPSTREAM = (CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES, DEDUP_NEAR_DUPLICATES)
LABEL_COLUMNS = ("language", "ppl_bucket", "host", "domain_class", "domain_confidence")  # mixture labels, as curated
DOC_COLUMNS = ("doc_id", "record_id", "deletion_key", "crawl", "segment", "text", *LABEL_COLUMNS)
CHECK_COLUMNS = ("tokenizer_id", "doc_id", "crawl", "segment", "tokens", "token_dtype", "n_tokens", "tokens_sha256")


@dataclass(frozen=True)
class TokenizeParams:
    """Knobs of tokenization; none changes the stored rows, `docs_per_row_group` changes the files' layout."""

    docs_per_row_group: int = knob(
        1024,
        "documents per Parquet row group: the loader reads and block-shuffles "
        "whole row groups; ~1k documents (~1-3 MB of tokens) keeps reads large "
        "enough for object stores and leaves enough row groups to shuffle",
    )
    encode_batch_docs: int = knob(
        2048,
        "documents per encode_batch call: larger calls parallelise better; memory holds one call's texts and tokens",
    )
    files_per_slice: int = knob(
        1, "curated data files per task: the unit an executor runs (results do not depend on it)"
    )

    def hashed(self) -> dict:
        """What is recorded as the snapshot's config hash (with the tokenizer id)."""
        return {"docs_per_row_group": self.docs_per_row_group, "encode_batch_docs": self.encode_batch_docs}


@dataclass(frozen=True)
class TokenizerRef:
    """A tokenizer.json on disk and the id it must have (a task refuses a file that changed since the plan)."""

    name: str
    path: str
    tokenizer_id: str

    def load(self) -> LoadedTokenizer:
        lt = load_tokenizer(self.path, self.name)
        if lt.info.tokenizer_id != self.tokenizer_id:
            raise ValueError(
                f"tokenizer {self.name!r} at {self.path} now has id {lt.info.tokenizer_id}, not the "
                f"planned {self.tokenizer_id}: the file changed during the run; run it again"
            )
        return lt


@dataclass(frozen=True)
class TokenizeTask:
    """Encode the kept documents of one slice of curated data files, leaving out `excluded` doc ids."""

    index: int
    lakehouse: Lakehouse
    tokenizer: TokenizerRef
    docs: ScanSlice
    excluded: frozenset[str]
    params: TokenizeParams
    out: TaskOutput


def partition(tokenizer_id: str, crawl: str, segment: str) -> dict[str, str]:
    return {"tokenizer_id": tokenizer_id, "crawl": crawl, "segment": segment}


def excluded_doc_ids(lakehouse: Lakehouse, crawl: str, segment: str, pins: Mapping[str, int | None]) -> frozenset[str]:
    """Kept-by-filters documents that dedup dropped: exact duplicates and near duplicates (with a decision) of
    the segment, at the pinned snapshots."""
    where = And(EqualTo("crawl", crawl), EqualTo("segment", segment))
    exact = lakehouse.scan_at(CURATED_EXACT_DUPLICATES, pins[CURATED_EXACT_DUPLICATES.identifier], ("doc_id",), where)
    near = lakehouse.scan_at(
        DEDUP_NEAR_DUPLICATES, pins[DEDUP_NEAR_DUPLICATES.identifier], ("doc_id",), And(where, Not(IsNull("decision")))
    )
    return frozenset(exact["doc_id"].to_pylist()) | frozenset(near["doc_id"].to_pylist())


def plan(
    lakehouse: Lakehouse,
    tokenizer: TokenizerRef,
    crawl: str,
    segment: str,
    pins: Mapping[str, int | None],
    params: TokenizeParams,
    run: str,
) -> list[TokenizeTask]:
    """One task per `params.files_per_slice` data files of the segment's kept curated documents (scan order),
    all at the pinned snapshots (`pins`: `lakehouse.snapshot_ids(UPSTREAM)`)."""
    excluded = excluded_doc_ids(lakehouse, crawl, segment, pins)
    kept = And(EqualTo("crawl", crawl), And(EqualTo("segment", segment), EqualTo("kept", True)))
    slices = lakehouse.slices(
        CURATED_DOCUMENTS, pins[CURATED_DOCUMENTS.identifier], kept, DOC_COLUMNS, params.files_per_slice
    )
    part = partition(tokenizer.tokenizer_id, crawl, segment)
    return [
        TokenizeTask(i, lakehouse, tokenizer, s, excluded, params, lakehouse.output(TOKENIZED_DOCUMENTS, part, run, i))
        for i, s in enumerate(slices)
    ]


def encode_rows(lt: LoadedTokenizer, docs: Sequence[dict]) -> pa.Table:
    """Rows of tokenized.documents for curated rows (`DOC_COLUMNS`): tokens with EOS, count, checksum, labels."""
    arrays = encode_documents(lt, [d["text"] for d in docs])
    data = [a.tobytes() for a in arrays]
    n = len(docs)
    return pa.table(
        {
            "tokenizer_id": [lt.info.tokenizer_id] * n,
            **{c: [d[c] for d in docs] for c in ("doc_id", "record_id", "deletion_key", "crawl", "segment")},
            "tokens": data,
            "token_dtype": [lt.info.token_dtype] * n,
            "n_tokens": pa.array([len(a) for a in arrays], pa.int32()),
            "tokens_sha256": [tokens_checksum(d) for d in data],
            **{c: [d[c] for d in docs] for c in LABEL_COLUMNS},
        }
    )


def run_task(task: TokenizeTask) -> TaskResult:
    """Encode the slice in calls of `encode_batch_docs` documents (at least a row group's worth), written in
    row groups of `docs_per_row_group`; stats: documents, tokens, duplicates left out. Never commits."""
    p = task.params
    lt = task.tokenizer.load()
    writer = FileWriter(task.out, row_group_rows=p.docs_per_row_group)
    per_call = max(p.encode_batch_docs, p.docs_per_row_group)
    stats = {"documents": 0, "tokens": 0, "excluded": 0}
    pending: list[dict] = []

    def flush() -> None:
        if pending:
            rows = encode_rows(lt, pending)
            writer.write(rows)
            stats["documents"] += rows.num_rows
            stats["tokens"] += pc.sum(rows["n_tokens"]).as_py()
            pending.clear()

    for batch in task.lakehouse.read_slice(task.docs):
        for row in batch.to_pylist():
            if row["doc_id"] in task.excluded:
                stats["excluded"] += 1
                continue
            pending.append(row)
            if len(pending) >= per_call:
                flush()
    flush()
    return TaskResult(task.index, (writer.close(),), stats)


def commit(
    lakehouse: Lakehouse,
    tokenizer_id: str,
    crawl: str,
    segment: str,
    results: Sequence[TaskResult],
    provenance: Provenance,
) -> CommitResult:
    """Replace the (tokenizer, segment) partition of tokenized.documents with the tasks' files, in one transaction."""
    done = lakehouse.commit(
        results, {TOKENIZED_DOCUMENTS: partition(tokenizer_id, crawl, segment)}, {TOKENIZED_DOCUMENTS: provenance}
    )
    return done[TOKENIZED_DOCUMENTS]


def totals(results: Sequence[TaskResult]) -> dict[str, int]:
    """Documents, tokens and duplicates left out, summed over the tasks."""
    return {k: sum(int(r.stats[k]) for r in results) for k in ("documents", "tokens", "excluded")}


# --- the check of stored rows --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenCheckParams:
    """Knobs of the blocking check of tokenized.documents."""

    decode_sample: int = knob(
        64,
        "documents per (tokenizer, crawl, segment) decoded and compared with the curated "
        "text (every row's checksum and count are verified)",
    )


@dataclass
class CheckReport:
    rows_checked: int = 0
    rows_decoded: int = 0
    problems: list[dict] = field(default_factory=list)


def check_documents(
    lakehouse: Lakehouse, tokenizer_name: str | None, crawl: str | None, segment: str | None, decode_sample: int
) -> CheckReport:
    """Every stored row of the scope (a tokenizer by name and/or a segment; None: all) verified by checksum and
    count; the first `decode_sample` rows per (tokenizer, crawl, segment) decoded with the tokenizer recovered
    from tokenized.tokenizers and compared with the curated text. Problems name the doc_id."""
    stored = lakehouse.scan(
        TOKENIZED_TOKENIZERS, row_filter=EqualTo("name", tokenizer_name) if tokenizer_name else None
    ).to_pylist()
    loaded = {
        r["tokenizer_id"]: tokenizer_from_json(r["tokenizer_json"], r["name"], known_id=r["tokenizer_id"])
        for r in stored
    }
    where: BooleanExpression = AlwaysTrue()
    if crawl is not None:
        where = And(EqualTo("crawl", crawl), EqualTo("segment", segment))
    if tokenizer_name:
        where = And(where, In("tokenizer_id", sorted(loaded))) if loaded else AlwaysFalse()
    report, seen = CheckReport(), {}
    reader = lakehouse.batches_at(TOKENIZED_DOCUMENTS, lakehouse.snapshot_id(TOKENIZED_DOCUMENTS), CHECK_COLUMNS, where)
    for batch in reader:
        rows = batch.to_pylist()
        report.rows_checked += len(rows)
        sample, rest = [], []
        for r in rows:
            key = (r["tokenizer_id"], r["crawl"], r["segment"])
            seen[key] = seen.get(key, 0) + 1
            (sample if seen[key] <= decode_sample else rest).append(r)
        report.problems += check_rows(rest)
        _check_sample(lakehouse, sample, loaded, report)
    return report


def _check_sample(
    lakehouse: Lakehouse, sample: list[dict], loaded: Mapping[str, LoadedTokenizer], report: CheckReport
) -> None:
    texts = _curated_texts(lakehouse, [r["doc_id"] for r in sample])
    for tid in sorted({r["tokenizer_id"] for r in sample}):
        part = [r for r in sample if r["tokenizer_id"] == tid]
        if tid not in loaded:
            report.problems += [
                {"doc_id": r["doc_id"], "problem": f"tokenizer {tid} not in {TOKENIZED_TOKENIZERS.identifier}"}
                for r in part
            ]
            continue
        report.problems += check_rows(part, loaded[tid], texts)
        report.rows_decoded += len(part)


def _curated_texts(lakehouse: Lakehouse, doc_ids: list[str]) -> dict[str, str]:
    if not doc_ids:
        return {}
    t = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", "text"), In("doc_id", doc_ids))
    return dict(zip(t["doc_id"].to_pylist(), t["text"].to_pylist(), strict=True))
