"""Run views in the lakehouse: build a candidate, check it, decide on it. No Dagster (see README.md)."""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, EqualTo, IsNull, Not, Or

from assets.dedup.semantic_clusters import split_cluster_ids
from assets.dedup.splits import (
    SEMANTIC_THRESHOLD,
    SPLIT_SEED,
    SPLITS,
    TEST_FRACTION,
    VALIDATION_FRACTION,
    SplitParams,
    cluster_ids,
    split_of,
)
from assets.knobs import knob
from assets.run_view import selection
from assets.run_view.layout import publish_layout
from assets.run_view.mixture import Component, Realised, select, within_tolerance
from assets.run_view.selection import EXCLUSION_REASONS, SAMPLE_FIELDS
from assets.tokenized.tokens import check_rows
from iceberg_catalog import CommitResult, Lakehouse, Provenance
from iceberg_catalog.run_view_contract import (
    FORMAT,
    STATUSES,
    Manifest,
    check_name,
    run_view_id,
    samples_digest,
    tag_name,
)
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    DEDUP_NEAR_DUPLICATES,
    QUARANTINE_EVAL_ITEMS,
    QUARANTINE_MATCHES,
    QUARANTINE_SCREENINGS,
    RUN_VIEW_MANIFESTS,
    RUN_VIEW_SAMPLES,
    TABLES,
    TOKENIZED_DOCUMENTS,
    TOKENIZED_TOKENIZERS,
    TableDef,
)

log = logging.getLogger(__name__)

# Every table a candidate reads, pinned at one snapshot each (the manifest's "inputs", keyed by identifier).
INPUT_TABLES = (
    *(TOKENIZED_DOCUMENTS, TOKENIZED_TOKENIZERS),
    *(CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES, DEDUP_NEAR_DUPLICATES),
    *(QUARANTINE_EVAL_ITEMS, QUARANTINE_MATCHES, QUARANTINE_SCREENINGS),
)
TOKENIZER_FIELDS = ("tokenizer_id", "name", "vocab_size", "eos_id", "token_dtype")
CHECKS = ("non_empty", "checksums_verified", "shares_within_tolerance", "quarantine_clean")
# the columns of a manifests row fixed when the candidate is built; only the lifecycle columns change after
FROZEN_COLUMNS = frozenset(
    {
        "manifest_json",
        "manifest_sha256",
        "run_view_id",
        "name",
        "tokenizer_id",
        "seed",
        "n_samples",
        "n_tokens",
        "created_at",
        "created_by_run_id",
    }
)
WRITE_CHUNK_ROWS = 65536


class RunViewRefused(RuntimeError):
    """The gate refused a decision; the message says why and what to do."""


class UnknownRunView(RunViewRefused):
    pass


class StaleManifest(RunViewRefused):
    pass


class ChecksNotPassed(RunViewRefused):
    pass


class AlreadyDecided(RunViewRefused):
    pass


class IntegrityError(RuntimeError):
    """Stored samples do not match the manifest's digest."""


@dataclass(frozen=True)
class RunViewSpec:
    """What a candidate is built from: the `run_view/candidate` asset's config, as plain values."""

    name: str = knob("demo", "The view's name: the run view id is `<name>-<12 hex digits of the manifest hash>`.")
    tokenizer: str = knob("gpt2", "A registered tokenizer (tokenized.tokenizers), by name or id.")
    components: tuple[Component, ...] = knob(
        (Component("all", 1.0),),
        "The mixture: components with a token-share weight and label filters; a "
        "document belongs to the first component it matches.",
    )
    seed: int = knob(0, "Seed of the selection order and of the loader's shuffle.")
    token_budget: int | None = knob(None, "Tokens in the view; null = as many as the mixture allows.")
    epochs: int | None = knob(None, "Epochs the loader serves; null = unbounded.")
    seq_len: int = knob(2048, "Packed sequence length the loader produces.")
    cross_document_attention: str = knob("masked", "'masked' (attention stays within a document) or 'allowed'.")
    share_tolerance: float = knob(0.01, "Allowed |realised - requested| token share per component (0.01 = 1 point).")
    split: str | None = knob(
        None,
        "'train', 'validation' or 'test': only documents whose cluster (near duplicates joined by semantic "
        "links, assets/dedup/splits.py) falls in that split; null: every document.",
    )
    validation_fraction: float = knob(VALIDATION_FRACTION, "Share of near-duplicate clusters in the validation split.")
    test_fraction: float = knob(TEST_FRACTION, "Share of near-duplicate clusters in the test split.")
    split_seed: int = knob(SPLIT_SEED, "Seed of the split assignment (not of the selection order: that is `seed`).")
    semantic_threshold: float | None = knob(
        SEMANTIC_THRESHOLD,
        "With a split: documents whose embeddings have at least this cosine are semantic neighbours and share "
        "a split (assets/dedup/semantic_clusters.py, measured); null: near-duplicate clusters only.",
    )

    def __post_init__(self) -> None:
        check_name(self.name)
        object.__setattr__(self, "components", tuple(self.components))
        if self.cross_document_attention not in ("masked", "allowed"):
            raise ValueError(
                f"cross_document_attention must be 'masked' or 'allowed', got {self.cross_document_attention!r}"
            )
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {self.seq_len}")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"epochs must be >= 1 or null (unbounded), got {self.epochs}")
        if not 0 <= self.share_tolerance < 1:
            raise ValueError(f"share_tolerance is a fraction in [0, 1), got {self.share_tolerance}")
        if self.split is not None and self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS} or null, got {self.split!r}")
        self.split_params()  # checks the fractions

    def split_params(self) -> SplitParams:
        return SplitParams(self.validation_fraction, self.test_fraction, self.split_seed, self.semantic_threshold)

    def config(self) -> dict:
        return {
            "name": self.name,
            "tokenizer": self.tokenizer,
            "components": [c.as_dict() for c in self.components],
            "seed": self.seed,
            "token_budget": self.token_budget,
            "epochs": self.epochs,
            "seq_len": self.seq_len,
            "cross_document_attention": self.cross_document_attention,
            "share_tolerance": self.share_tolerance,
            # only a view that selects a split names one: every other view keeps its config, hence its id
            **({"split": {"split": self.split, **self.split_params().as_dict()}} if self.split else {}),
        }


@dataclass(frozen=True)
class CandidateResult:
    run_view_id: str
    manifest_sha256: str
    manifest: dict
    status: str
    created: bool  # False when this exact view already existed (it is never rewritten)
    samples_snapshot_id: int | None = None
    realised: Sequence[Realised] = field(default_factory=tuple)


def _ids(lakehouse: Lakehouse, t: TableDef, snapshot_id: int | None, row_filter=None) -> set[str]:
    """The doc_ids of `t` at `snapshot_id` (matching `row_filter`)."""
    return set(lakehouse.scan_at(t, snapshot_id, ("doc_id",), row_filter).column("doc_id").to_pylist())


def resolve_tokenizer(lakehouse: Lakehouse, tokenizer: str, snapshot_id: int | None) -> dict:
    """The registered tokenizer named `tokenizer` (by name or id) at the pinned snapshot."""
    rows = lakehouse.scan_at(TOKENIZED_TOKENIZERS, snapshot_id, TOKENIZER_FIELDS).to_pylist()
    found = [r for r in rows if tokenizer in (r["name"], r["tokenizer_id"])]
    if not found:
        known = sorted(r["name"] for r in rows) or ["(none: run the register_tokenizer job)"]
        raise ValueError(f"tokenizer {tokenizer!r} is not registered in {TOKENIZED_TOKENIZERS}; known: {known}")
    return found[0]


def eligible_documents(
    lakehouse: Lakehouse,
    pinned: Mapping[str, int | None],
    tokenizer_id: str,
    split: str | None = None,
    split_params: SplitParams = SplitParams(),
) -> tuple[list[dict], dict[str, int]]:
    """Tokenized documents a run view may hold at the pinned snapshots (sorted by doc_id), and exclusion counts
    by reason (each excluded document counted once, under the first reason in EXCLUSION_REASONS order; with a
    `split`, then `other_split` for eligible documents whose near-duplicate cluster is in another split)."""

    def at(t: TableDef) -> int | None:
        return pinned[t.identifier]

    docs = lakehouse.scan_at(
        TOKENIZED_DOCUMENTS, at(TOKENIZED_DOCUMENTS), SAMPLE_FIELDS, EqualTo("tokenizer_id", tokenizer_id)
    ).to_pylist()
    kept = _ids(lakehouse, CURATED_DOCUMENTS, at(CURATED_DOCUMENTS), EqualTo("kept", True))
    exact = _ids(lakehouse, CURATED_EXACT_DUPLICATES, at(CURATED_EXACT_DUPLICATES))
    near = _ids(lakehouse, DEDUP_NEAR_DUPLICATES, at(DEDUP_NEAR_DUPLICATES), Not(IsNull("decision")))
    contaminated = _ids(lakehouse, QUARANTINE_MATCHES, at(QUARANTINE_MATCHES))
    reasons: Counter = Counter()
    eligible = []
    for d in docs:
        reason = (
            "not_kept"
            if d["doc_id"] not in kept
            else "exact_duplicate"
            if d["doc_id"] in exact
            else "near_duplicate"
            if d["doc_id"] in near
            else "eval_contaminated"
            if d["doc_id"] in contaminated
            else None
        )
        if reason:
            reasons[reason] += 1
        else:
            eligible.append(d)
    eligible.sort(key=lambda d: d["doc_id"])
    counts = {r: reasons.get(r, 0) for r in EXCLUSION_REASONS}
    if split is None:
        return eligible, counts
    if split_params.semantic_threshold is None:  # as views recorded before semantic links were built
        table = lakehouse.scan_at(DEDUP_NEAR_DUPLICATES, at(DEDUP_NEAR_DUPLICATES), ("doc_id", "cluster_id"))
        near = dict(zip(table.column("doc_id").to_pylist(), table.column("cluster_id").to_pylist()))
        clusters = cluster_ids((d["doc_id"] for d in eligible), near, {})
    else:  # near/exact-duplicate clusters joined by semantic links, crawl-ordered over every kept document
        clusters = split_cluster_ids(lakehouse, pinned, split_params.semantic_threshold)
    chosen = [d for d in eligible if split_of(clusters.get(d["doc_id"], d["doc_id"]), split_params) == split]
    return chosen, {**counts, "other_split": len(eligible) - len(chosen)}


def screened_pairs(lakehouse: Lakehouse, snapshot_id: int | None) -> set[tuple[str, str]]:
    """(benchmark, "crawl/segment") pairs quarantine.screenings records as screened at `snapshot_id`."""
    rows = lakehouse.scan_at(QUARANTINE_SCREENINGS, snapshot_id, ("benchmark", "crawl", "segment")).to_pylist()
    return {(r["benchmark"], f"{r['crawl']}/{r['segment']}") for r in rows}


def quarantine_report(
    lakehouse: Lakehouse, pinned: Mapping[str, int | None], segments: Iterable[str], excluded_contaminated: int
) -> dict:
    """Which benchmarks the view was screened against, which of its segments were screened, what is missing."""
    items = lakehouse.scan_at(QUARANTINE_EVAL_ITEMS, pinned[QUARANTINE_EVAL_ITEMS.identifier], ("benchmark",))
    per_bench = Counter(items.column("benchmark").to_pylist())
    done = screened_pairs(lakehouse, pinned[QUARANTINE_SCREENINGS.identifier])
    segs = sorted(set(segments))
    missing = [[b, s] for b in sorted(per_bench) for s in segs if (b, s) not in done]
    return {
        "benchmarks": dict(sorted(per_bench.items())),
        "segments": segs,
        "missing_pairs": missing,
        "contaminated_documents_excluded": excluded_contaminated,
    }


def spec_from_manifest(manifest: Manifest | Mapping) -> RunViewSpec:
    """The spec a view was built from: rebuilding it on today's inputs (after a deletion) reuses it."""
    m = Manifest.of(manifest)
    mix = m.mixture
    return RunViewSpec(
        name=m.name,
        tokenizer=m.tokenizer_name,
        seed=m.seed,
        token_budget=mix["token_budget"],
        epochs=m.epochs,
        seq_len=m.packing["seq_len"],
        share_tolerance=mix["share_tolerance"],
        cross_document_attention=m.packing["cross_document_attention"],
        components=[Component(c["name"], c["weight"], c["filters"], c["max_repetitions"]) for c in mix["components"]],
        **_split_fields(m.split),
    )


def _split_fields(split: Mapping | None) -> dict:
    if split is None:
        return {}
    return {
        "split": split["split"],
        "validation_fraction": split["validation"],
        "test_fraction": split["test"],
        "split_seed": split["seed"],
        "semantic_threshold": split.get("semantic_threshold"),  # absent: recorded before semantic links
    }


def assemble_manifest(
    spec: RunViewSpec,
    provenance: Provenance,
    pinned: Mapping[str, int | None],
    tok: Mapping,
    realised: Sequence[Realised],
    samples: Mapping[str, object],
    exclusions: Mapping[str, int],
    quarantine: Mapping,
    supersedes: str | None = None,
    policy: Mapping[str, str] | None = None,
) -> dict:
    """The manifest of a view from what its selection found: `samples` is its {n_samples, n_tokens, n_documents,
    sha256}. `policy`: the mixture policy that decided the components ({version, sha256}: `mixture/<n>` or
    `mixture/adhoc`)."""
    return {
        "format": FORMAT,
        "name": spec.name,
        "tokenizer": {k: tok[k] for k in TOKENIZER_FIELDS},
        "inputs": dict(pinned),
        "mixture": {
            "components": [c.as_dict() for c in spec.components],
            "token_budget": spec.token_budget,
            "share_tolerance": spec.share_tolerance,
        },
        "realised": [r.as_dict() for r in realised],
        "seed": spec.seed,
        "epoch_policy": {"epochs": spec.epochs, "shuffle": "block"},
        "packing": {
            "seq_len": spec.seq_len,
            "eos_id": tok["eos_id"],
            "cross_document_attention": spec.cross_document_attention,
        },
        "samples": dict(samples),
        "exclusions": dict(exclusions),
        "quarantine": dict(quarantine),
        "code_version": provenance.code_version,
        "config_hash": provenance.config_hash,
        "supersedes": supersedes,
        # absent without a split, so views that select no split keep their bytes and ids
        **({"split": {"split": spec.split, **spec.split_params().as_dict()}} if spec.split is not None else {}),
        # the same policy version and inputs give the same id (a rollback finds the old view)
        **({"policy": dict(policy)} if policy is not None else {}),
    }


def build_candidate(
    lakehouse: Lakehouse,
    spec: RunViewSpec,
    provenance: Provenance,
    pinned: Mapping[str, int | None] | None = None,
    supersedes: str | None = None,
    policy: Mapping[str, str] | None = None,
    executor: selection.Executor = selection.in_process,
    samples_per_task: int = selection.SAMPLES_PER_TASK,
) -> CandidateResult:
    """Select, hash and write a candidate run view; an existing view with the same id is returned untouched.
    `supersedes` names the view this one replaces (a rebuild after a deletion); `policy` the mixture policy
    version that decided its components (in the manifest; the snapshots carry it via `provenance`). The
    selection runs as tasks on `executor` (`assets.run_view.selection`: `executor(fn, tasks)` -> results), each
    holding one segment or `samples_per_task` samples; a split view is selected in one process (its clusters
    are one global mapping until issue 42 stores them)."""
    pinned = dict(pinned or lakehouse.snapshot_ids(INPUT_TABLES))
    if spec.split is not None:
        return build_in_one_process(lakehouse, spec, provenance, pinned, supersedes, policy)
    tok = resolve_tokenizer(lakehouse, spec.tokenizer, pinned[TOKENIZED_TOKENIZERS.identifier])
    run = uuid.uuid4().hex
    p, segments = selection.plan(
        lakehouse, pinned, tok["tokenizer_id"], spec.components, spec.seed, spec.token_budget, run, samples_per_task
    )
    chosen = selection.execute(p, segments, executor)
    try:
        quarantine = quarantine_report(lakehouse, pinned, chosen.segments, chosen.exclusions["eval_contaminated"])
        found = (chosen.realised, chosen.samples, chosen.exclusions, quarantine)
        manifest = assemble_manifest(spec, provenance, pinned, tok, *found, supersedes, policy)
    except BaseException:
        selection.discard(p, chosen.scratch_files)
        raise

    def write(rv_id: str, tokenizer_id: str, prov: Provenance):
        return selection.write(chosen, rv_id, prov, executor, run)

    discard = partial(selection.discard, p, chosen.scratch_files)
    return _store_candidate(lakehouse, spec, provenance, pinned, manifest, list(chosen.realised), write, discard)


def build_in_one_process(
    lakehouse: Lakehouse,
    spec: RunViewSpec,
    provenance: Provenance,
    pinned: Mapping[str, int | None],
    supersedes: str | None = None,
    policy: Mapping[str, str] | None = None,
) -> CandidateResult:
    """`build_candidate` with every document and sample held in this process: split views (their clusters are
    one mapping), and the baseline bench/run_view_scale.py measures the tasks against."""
    tok = resolve_tokenizer(lakehouse, spec.tokenizer, pinned[TOKENIZED_TOKENIZERS.identifier])
    docs, exclusions = eligible_documents(lakehouse, pinned, tok["tokenizer_id"], spec.split, spec.split_params())
    samples, realised = select(docs, spec.components, spec.seed, spec.token_budget)
    by_id = {d["doc_id"]: d for d in docs}
    rows = [
        {
            "sample_index": i,
            "doc_id": s.doc_id,
            "repetition": s.repetition,
            "component": s.component,
            "n_tokens": s.n_tokens,
            "tokens_sha256": by_id[s.doc_id]["tokens_sha256"],
        }
        for i, s in enumerate(samples)
    ]
    segments = (f"{by_id[s.doc_id]['crawl']}/{by_id[s.doc_id]['segment']}" for s in samples)
    summary = {
        "n_samples": len(rows),
        "n_tokens": sum(r["n_tokens"] for r in rows),
        "n_documents": len({r["doc_id"] for r in rows}),
        "sha256": samples_digest(rows),
    }
    quarantine = quarantine_report(lakehouse, pinned, segments, exclusions["eval_contaminated"])
    found = (realised, summary, exclusions, quarantine)
    manifest = assemble_manifest(spec, provenance, pinned, tok, *found, supersedes, policy)
    write = partial(_write_samples, lakehouse, rows=rows, by_id=by_id)
    return _store_candidate(lakehouse, spec, provenance, pinned, manifest, realised, write, lambda: None)


def _store_candidate(
    lakehouse: Lakehouse,
    spec: RunViewSpec,
    provenance: Provenance,
    pinned: Mapping[str, int | None],
    manifest: dict,
    realised: Sequence[Realised],
    write: Callable[[str, str, Provenance], CommitResult],
    discard: Callable[[], None],
) -> CandidateResult:
    """Hash the manifest, then (unless that view exists) `write` its samples and store its manifests row."""
    frozen = Manifest.from_dict(manifest)
    sha = frozen.sha256
    rv_id = run_view_id(spec.name, sha)
    existing = load_manifest(lakehouse, rv_id)
    if existing is not None:
        discard()
        log.info("run view %s already exists (%s); not rewritten", rv_id, existing["status"])
        return CandidateResult(rv_id, sha, manifest, existing["status"], created=False, realised=realised)
    tokenizer_id = frozen.tokenizer_id
    prov = _with(provenance, rv_id, pinned, {**provenance.extra, "run-view-id": rv_id})
    samples_commit = write(rv_id, tokenizer_id, prov)
    _write_manifest_row(
        lakehouse,
        {
            "run_view_id": rv_id,
            "name": spec.name,
            "status": "candidate",
            "manifest_sha256": sha,
            "manifest_json": frozen.text,
            "tokenizer_id": tokenizer_id,
            "seed": spec.seed,
            "n_samples": frozen.n_samples,
            "n_tokens": frozen.n_tokens,
            "created_at": _now(),
            "created_by_run_id": provenance.run_id,
            "reviewer": None,
            "decided_at": None,
            "decision_comment": None,
            "decided_by_run_id": None,
            "superseded_by_request": None,
            "supersedes": manifest["supersedes"],
        },
        prov,
    )
    return CandidateResult(
        rv_id,
        sha,
        manifest,
        "candidate",
        created=True,
        samples_snapshot_id=samples_commit.snapshot_id,
        realised=realised,
    )


def _write_samples(
    lakehouse: Lakehouse,
    rv_id: str,
    tokenizer_id: str,
    provenance: Provenance,
    rows: Sequence[dict],
    by_id: Mapping[str, dict],
) -> CommitResult:
    """The view's run_view.samples partition, in sample_index order (one transaction)."""
    writer = lakehouse.writer(RUN_VIEW_SAMPLES, {"run_view_id": rv_id})
    for start in range(0, len(rows), WRITE_CHUNK_ROWS):
        chunk = rows[start : start + WRITE_CHUNK_ROWS]
        writer.write(
            pa.Table.from_pylist(
                [
                    {
                        "run_view_id": rv_id,
                        "sample_index": r["sample_index"],
                        "doc_id": r["doc_id"],
                        "record_id": by_id[r["doc_id"]]["record_id"],
                        "deletion_key": by_id[r["doc_id"]]["deletion_key"],
                        "tokenizer_id": tokenizer_id,
                        "crawl": by_id[r["doc_id"]]["crawl"],
                        "segment": by_id[r["doc_id"]]["segment"],
                        "component": r["component"],
                        "repetition": r["repetition"],
                        "n_tokens": r["n_tokens"],
                        "tokens_sha256": r["tokens_sha256"],
                    }
                    for r in chunk
                ]
            )
        )
    return writer.commit(provenance)


def _with(p: Provenance, partition_key: str, upstream: Mapping, extra: Mapping) -> Provenance:
    return Provenance(p.asset_key, partition_key, p.run_id, p.code_version, p.config_hash, dict(upstream), dict(extra))


def _now() -> datetime:
    return datetime.now(UTC)


def _write_manifest_row(lakehouse: Lakehouse, row: dict, provenance: Provenance) -> int | None:
    writer = lakehouse.writer(RUN_VIEW_MANIFESTS, {"run_view_id": row["run_view_id"]})
    writer.write(pa.Table.from_pylist([row]))
    return writer.commit(provenance).snapshot_id


def load_manifest(lakehouse: Lakehouse, run_view_id: str, snapshot_id: int | None = None) -> dict | None:
    """The manifests row of one run view (with `manifest` parsed) at `snapshot_id` (default: current), or None."""
    sid = snapshot_id or lakehouse.snapshot_id(RUN_VIEW_MANIFESTS)
    rows = lakehouse.scan_at(RUN_VIEW_MANIFESTS, sid, row_filter=EqualTo("run_view_id", run_view_id)).to_pylist()
    if not rows:
        return None
    row = rows[0]
    row["manifest"] = json.loads(row["manifest_json"])
    return row


def list_run_views(lakehouse: Lakehouse) -> list[dict]:
    """Every run view, newest first, without the manifest text."""
    fields = [f.name for f in RUN_VIEW_MANIFESTS.schema.fields if f.name != "manifest_json"]
    rows = lakehouse.scan(RUN_VIEW_MANIFESTS, fields).to_pylist()
    return sorted(rows, key=lambda r: r["created_at"], reverse=True)


def read_samples(lakehouse: Lakehouse, run_view_id: str, snapshot_id: int | None = None) -> pa.Table:
    """The view's samples in canonical order (from `snapshot_id`, e.g. the view's tag, or the current one)."""
    sid = snapshot_id or lakehouse.snapshot_id(RUN_VIEW_SAMPLES)
    return lakehouse.scan_at(RUN_VIEW_SAMPLES, sid, row_filter=EqualTo("run_view_id", run_view_id)).sort_by(
        "sample_index"
    )


# ---- checks: pure over what is stored; each returns a list of problems (empty = passed) ----


def check_non_empty(manifest: Manifest | Mapping) -> list[str]:
    m = Manifest.of(manifest)
    return [] if m.n_samples > 0 and m.n_tokens > 0 else [f"no samples ({m.n_samples} samples, {m.n_tokens} tokens)"]


def check_shares(manifest: Manifest | Mapping) -> list[str]:
    m = Manifest.of(manifest)
    return within_tolerance([Realised(**r) for r in m.realised], m.mixture["share_tolerance"])


def _segments_filter(manifest: Manifest, segments: Sequence[tuple[str, str]]):
    """The view's tokenizer and (crawl, segment) partitions of tokenized.documents."""
    where = EqualTo("tokenizer_id", manifest.tokenizer_id)
    parts = [And(EqualTo("crawl", c), EqualTo("segment", g)) for c, g in segments]
    if parts:
        where = And(where, Or(*parts) if len(parts) > 1 else parts[0])
    return where


def check_checksums(lakehouse: Lakehouse, run_view_id: str, manifest: Manifest | Mapping) -> tuple[int, list[dict]]:
    """Every selected row re-read at the pinned snapshot: tokens against their checksum, token count, and the
    same sha256 as recorded in the samples, plus the samples' digest. Returns (rows verified, problems naming
    doc_ids)."""
    m = Manifest.of(manifest)
    samples = read_samples(lakehouse, run_view_id)
    problems: list[dict] = []
    if samples_digest(samples) != m.samples_sha256:
        problems.append({"doc_id": "*", "problem": "stored samples differ from the manifest's samples digest"})
    want = dict(zip(samples["doc_id"].to_pylist(), samples["tokens_sha256"].to_pylist()))
    # one pass over the view's partitions at the pinned snapshot (an In() filter per chunk would rescan them)
    segments = sorted(set(zip(samples["crawl"].to_pylist(), samples["segment"].to_pylist())))
    reader = lakehouse.batches_at(
        TOKENIZED_DOCUMENTS,
        m.inputs[TOKENIZED_DOCUMENTS.identifier],
        ("doc_id", "tokens", "token_dtype", "n_tokens", "tokens_sha256"),
        _segments_filter(m, segments),
    )
    wanted = pa.array(sorted(want), pa.string())
    found: set[str] = set()
    for batch in reader:
        rows = batch.filter(pc.is_in(batch.column("doc_id"), value_set=wanted)).to_pylist()
        found.update(r["doc_id"] for r in rows)
        problems += check_rows(rows)
        problems += [
            {"doc_id": r["doc_id"], "problem": "tokens_sha256 differs from the sample's"}
            for r in rows
            if r["tokens_sha256"] != want[r["doc_id"]]
        ]
    problems += [{"doc_id": d, "problem": "missing at the pinned snapshot"} for d in sorted(set(want) - found)]
    return len(found), problems


def check_quarantine(lakehouse: Lakehouse, run_view_id: str, manifest: Manifest | Mapping) -> list[str]:
    """No selected document in quarantine.matches (at the pinned snapshot, nor now), and every segment of the
    view screened against every registered benchmark."""
    m = Manifest.of(manifest)
    doc_ids = set(read_samples(lakehouse, run_view_id).column("doc_id").to_pylist())
    problems = []
    for label, sid in (
        ("pinned", m.inputs[QUARANTINE_MATCHES.identifier]),
        ("current", lakehouse.snapshot_id(QUARANTINE_MATCHES)),
    ):
        found = lakehouse.scan_at(QUARANTINE_MATCHES, sid, ("doc_id", "benchmark")).to_pylist()
        hits = sorted({(r["doc_id"], r["benchmark"]) for r in found if r["doc_id"] in doc_ids})
        problems += [f"{d} matches {b} ({label} {QUARANTINE_MATCHES})" for d, b in hits]
    q = m.quarantine
    if not q["benchmarks"]:
        problems.append(f"no benchmark registered in {QUARANTINE_EVAL_ITEMS}: nothing was screened")
    problems += [f"segment {s} not screened against {b}" for b, s in q["missing_pairs"]]
    return problems


# ---- the gate ----


def decide(
    lakehouse: Lakehouse,
    run_view_id: str,
    sha256: str,
    reviewer: str,
    decision: str,
    comment: str,
    check_results: Mapping[str, bool | None],
    provenance: Provenance,
) -> dict:
    """Approve or reject a candidate. Refuses (RunViewRefused subclasses) an unknown id, a stale hash, a view
    already decided, missing or failed checks. Returns the updated manifests row."""
    if decision not in ("approve", "reject"):
        raise ValueError(f"decision must be 'approve' or 'reject', got {decision!r}")
    if not reviewer.strip():
        raise ValueError("reviewer is required: name the person who reviewed the manifest")
    row = load_manifest(lakehouse, run_view_id)
    if row is None:
        known = [r["run_view_id"] for r in list_run_views(lakehouse) if r["status"] == "candidate"]
        raise UnknownRunView(f"unknown run view {run_view_id!r}; candidates: {known or 'none'}")
    if row["manifest_sha256"] != sha256:
        raise StaleManifest(
            f"run view {run_view_id}: manifest_sha256 {sha256!r} does not match the stored "
            f"{row['manifest_sha256']!r}; review the current manifest and use its hash"
        )
    if row["status"] != "candidate":
        raise AlreadyDecided(
            f"run view {run_view_id} is already {row['status']!r} (by {row['reviewer'] or '-'} at "
            f"{row['decided_at'] or '-'}); a published or rejected view is never changed: build a new "
            f"candidate"
        )
    if decision == "approve":
        failing = {name: check_results.get(name) for name in CHECKS if check_results.get(name) is not True}
        if failing:
            detail = ", ".join(f"{k}: {'not evaluated' if v is None else 'failed'}" for k, v in failing.items())
            raise ChecksNotPassed(
                f"run view {run_view_id} cannot be published: {detail}; re-materialise "
                f"run_view/candidate with its checks and fix what they report"
            )
        tag_pinned_snapshots(lakehouse, row)
    updated = {k: v for k, v in row.items() if k != "manifest"}
    updated.update(
        status="published" if decision == "approve" else "rejected",
        reviewer=reviewer.strip(),
        decided_at=_now(),
        decision_comment=comment,
        decided_by_run_id=provenance.run_id,
    )
    _write_manifest_row(
        lakehouse,
        updated,
        _with(
            provenance,
            run_view_id,
            {},
            {**provenance.extra, "run-view-id": run_view_id, "decision": decision, "reviewer": reviewer.strip()},
        ),
    )
    return updated


def tag_pinned_snapshots(lakehouse: Lakehouse, row: Mapping) -> dict[str, int]:
    """Tag `runview-<id>` on every pinned input snapshot and on the run_view.samples snapshot holding the
    view's rows (verified against the manifest's digest first). Idempotent."""
    manifest = Manifest.of(row["manifest"]) if "manifest" in row else Manifest.from_json(row["manifest_json"])
    rv_id = row["run_view_id"]
    current = lakehouse.snapshot_id(RUN_VIEW_SAMPLES)
    samples = read_samples(lakehouse, rv_id, current)
    if samples_digest(samples) != manifest.samples_sha256:
        raise IntegrityError(f"run view {rv_id}: {RUN_VIEW_SAMPLES} does not hold the rows the manifest hashed")
    targets = {ident: sid for ident, sid in manifest.inputs.items() if sid is not None}
    targets[RUN_VIEW_SAMPLES.identifier] = current
    name = tag_name(rv_id)
    for ident, sid in sorted(targets.items()):
        t = TABLES[ident]
        with lakehouse.commit_lock(t):
            table = lakehouse.table(t)
            ref = table.metadata.refs.get(name)
            if ref is not None:
                if ref.snapshot_id != sid:
                    raise IntegrityError(f"{ident} already has tag {name} on snapshot {ref.snapshot_id}, not {sid}")
                continue
            table.manage_snapshots().create_tag(snapshot_id=sid, tag_name=name).commit()
    # where each sample lies and one checksum per row group, for the loader (not in the manifest: see layout.py)
    publish_layout(lakehouse, rv_id, manifest, samples)
    return targets


def set_status(lakehouse: Lakehouse, run_view_id: str, provenance: Provenance, **changes) -> dict:
    """Rewrite one view's lifecycle columns (status, superseded_by_request, ...); the frozen manifest stays."""
    row = load_manifest(lakehouse, run_view_id)
    if row is None:
        raise UnknownRunView(f"unknown run view {run_view_id!r}")
    if FROZEN_COLUMNS & set(changes):
        raise ValueError(f"the frozen columns {sorted(FROZEN_COLUMNS & set(changes))} of a run view never change")
    if "status" in changes and changes["status"] not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {changes['status']!r}")
    updated = {k: v for k, v in row.items() if k != "manifest"}
    updated.update(changes)
    _write_manifest_row(
        lakehouse, updated, _with(provenance, run_view_id, {}, {**provenance.extra, "run-view-id": run_view_id})
    )
    return updated
