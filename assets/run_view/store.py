"""Run views in the lakehouse: build a candidate, check it, decide on it. Iceberg I/O, no Dagster.

A candidate pins the current snapshot of every input table, selects eligible documents at those snapshots
(tokenized, still kept by curation, not an exact or near duplicate, not matched by the evaluation
quarantine), applies the mixture, and writes `run_view.samples` then one `run_view.manifests` row with status
`candidate`. Deciding is the only way to publish: it refuses an unknown id, a stale hash, a view that is not
a candidate and checks that did not pass; on approval every pinned snapshot gets the tag `runview-<id>`
before the status becomes `published`, so a published view's bytes survive later rewrites of its inputs.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import And, EqualTo, IsNull, Not, Or

from assets.run_view.manifest import (
    FORMAT,
    canonical_json,
    check_name,
    manifest_sha256,
    run_view_id,
    samples_digest,
    tag_name,
)
from assets.run_view.mixture import Component, Realised, select, within_tolerance
from assets.tokenized.tokens import check_rows
from iceberg_catalog import TABLES, PartitionWriter, Provenance
from iceberg_catalog.catalog import load_table
from iceberg_catalog.commit import table_commit_lock

log = logging.getLogger(__name__)

# Every table a candidate reads, pinned at one snapshot each (the manifest's "inputs").
INPUT_TABLES = ("tokenized.documents", "tokenized.tokenizers", "curated.documents", "curated.exact_duplicates",
                "curated.near_duplicates", "quarantine.eval_items", "quarantine.matches", "quarantine.screenings")
SAMPLE_FIELDS = ("doc_id", "record_id", "deletion_key", "crawl", "segment", "n_tokens", "tokens_sha256",
                 "language", "ppl_bucket", "host", "domain_class")
CHECKS = ("non_empty", "checksums_verified", "shares_within_tolerance", "quarantine_clean")
STATUSES = ("candidate", "published", "rejected", "superseded")


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
    """What a candidate is built from (the `run_view/candidate` asset's config, as plain values)."""

    name: str
    tokenizer: str  # a registered tokenizer's name or id
    components: Sequence[Component]
    seed: int = 0
    token_budget: int | None = None
    epochs: int | None = None
    seq_len: int = 2048
    cross_document_attention: str = "masked"
    share_tolerance: float = 0.01

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.cross_document_attention not in ("masked", "allowed"):
            raise ValueError(f"cross_document_attention must be 'masked' or 'allowed', "
                             f"got {self.cross_document_attention!r}")
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {self.seq_len}")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"epochs must be >= 1 or null (unbounded), got {self.epochs}")
        if not 0 <= self.share_tolerance < 1:
            raise ValueError(f"share_tolerance is a fraction in [0, 1), got {self.share_tolerance}")

    def config(self) -> dict:
        return {"name": self.name, "tokenizer": self.tokenizer, "components": [c.as_dict() for c in self.components],
                "seed": self.seed, "token_budget": self.token_budget, "epochs": self.epochs, "seq_len": self.seq_len,
                "cross_document_attention": self.cross_document_attention, "share_tolerance": self.share_tolerance}


@dataclass(frozen=True)
class CandidateResult:
    run_view_id: str
    manifest_sha256: str
    manifest: dict
    status: str
    created: bool  # False when this exact view already existed (it is never rewritten)
    samples_snapshot_id: int | None = None
    realised: Sequence[Realised] = field(default_factory=tuple)


def snapshot_ids(catalog: Catalog, identifiers: Iterable[str] = INPUT_TABLES) -> dict[str, int | None]:
    out = {}
    for ident in identifiers:
        snap = load_table(catalog, ident).current_snapshot()
        out[ident] = snap.snapshot_id if snap else None
    return out


def _scan(catalog: Catalog, ident: str, snapshot_id: int | None, fields: Sequence[str], row_filter=None) -> pa.Table:
    if snapshot_id is None:  # never written: empty at that point in time
        schema = TABLES[ident].arrow_schema
        return pa.schema([schema.field(f) for f in fields]).empty_table()
    table = load_table(catalog, ident)
    kwargs = {"row_filter": row_filter} if row_filter is not None else {}
    return table.scan(selected_fields=tuple(fields), snapshot_id=snapshot_id, **kwargs).to_arrow()


def resolve_tokenizer(catalog: Catalog, tokenizer: str, snapshot_id: int | None) -> dict:
    """The registered tokenizer named `tokenizer` (by name or id) at the pinned snapshot."""
    rows = _scan(catalog, "tokenized.tokenizers", snapshot_id,
                 ("tokenizer_id", "name", "vocab_size", "eos_id", "token_dtype")).to_pylist()
    found = [r for r in rows if tokenizer in (r["name"], r["tokenizer_id"])]
    if not found:
        known = sorted(r["name"] for r in rows) or ["(none: run the register_tokenizer job)"]
        raise ValueError(f"tokenizer {tokenizer!r} is not registered in tokenized.tokenizers; known: {known}")
    return found[0]


def eligible_documents(catalog: Catalog, pinned: Mapping[str, int | None], tokenizer_id: str
                       ) -> tuple[list[dict], dict[str, int]]:
    """Tokenized documents a run view may hold at the pinned snapshots, and exclusion counts by reason
    (each excluded document counted once, under the first reason in this order)."""
    docs = _scan(catalog, "tokenized.documents", pinned["tokenized.documents"], SAMPLE_FIELDS,
                 EqualTo("tokenizer_id", tokenizer_id)).to_pylist()
    kept = set(_scan(catalog, "curated.documents", pinned["curated.documents"], ("doc_id",),
                     EqualTo("kept", True)).column("doc_id").to_pylist())
    exact = set(_scan(catalog, "curated.exact_duplicates", pinned["curated.exact_duplicates"], ("doc_id",))
                .column("doc_id").to_pylist())
    near = set(_scan(catalog, "curated.near_duplicates", pinned["curated.near_duplicates"], ("doc_id",),
                     Not(IsNull("decision"))).column("doc_id").to_pylist())
    contaminated = set(_scan(catalog, "quarantine.matches", pinned["quarantine.matches"], ("doc_id",))
                       .column("doc_id").to_pylist())
    reasons: Counter = Counter()
    eligible = []
    for d in docs:
        reason = ("not_kept" if d["doc_id"] not in kept else "exact_duplicate" if d["doc_id"] in exact
                  else "near_duplicate" if d["doc_id"] in near else "eval_contaminated" if d["doc_id"] in contaminated
                  else None)
        if reason:
            reasons[reason] += 1
        else:
            eligible.append(d)
    eligible.sort(key=lambda d: d["doc_id"])
    return eligible, {r: reasons.get(r, 0) for r in ("not_kept", "exact_duplicate", "near_duplicate",
                                                        "eval_contaminated")}


def screened_pairs(catalog: Catalog, snapshot_id: int | None) -> set[tuple[str, str]]:
    """(benchmark, "crawl/segment") pairs quarantine.screenings records as screened at `snapshot_id`."""
    rows = _scan(catalog, "quarantine.screenings", snapshot_id, ("benchmark", "crawl", "segment")).to_pylist()
    return {(r["benchmark"], f"{r['crawl']}/{r['segment']}") for r in rows}


def quarantine_report(catalog: Catalog, pinned: Mapping[str, int | None], segments: Iterable[str],
                      excluded_contaminated: int) -> dict:
    """Which benchmarks the view was screened against, which of its segments were screened, what is missing."""
    items = _scan(catalog, "quarantine.eval_items", pinned["quarantine.eval_items"], ("benchmark",))
    per_bench = Counter(items.column("benchmark").to_pylist())
    done = screened_pairs(catalog, pinned["quarantine.screenings"])
    segs = sorted(set(segments))
    missing = [[b, s] for b in sorted(per_bench) for s in segs if (b, s) not in done]
    return {"benchmarks": dict(sorted(per_bench.items())), "segments": segs, "missing_pairs": missing,
            "contaminated_documents_excluded": excluded_contaminated}


def spec_from_manifest(manifest: Mapping) -> RunViewSpec:
    """The spec a view was built from: rebuilding it on today's inputs (after a deletion) reuses it."""
    mix = manifest["mixture"]
    return RunViewSpec(
        name=manifest["name"], tokenizer=manifest["tokenizer"]["name"], seed=manifest["seed"],
        token_budget=mix["token_budget"], epochs=manifest["epoch_policy"]["epochs"],
        seq_len=manifest["packing"]["seq_len"], share_tolerance=mix["share_tolerance"],
        cross_document_attention=manifest["packing"]["cross_document_attention"],
        components=[Component(c["name"], c["weight"], c["filters"], c["max_repetitions"]) for c in mix["components"]])


def build_candidate(catalog: Catalog, spec: RunViewSpec, provenance: Provenance,
                    catalog_fingerprint: str = "", pinned: Mapping[str, int | None] | None = None,
                    supersedes: str | None = None) -> CandidateResult:
    """Select, hash and write a candidate run view; an existing view with the same id is returned untouched.
    `supersedes` names the view this one replaces (a rebuild after a deletion)."""
    pinned = dict(pinned or snapshot_ids(catalog))
    tok = resolve_tokenizer(catalog, spec.tokenizer, pinned["tokenized.tokenizers"])
    docs, exclusions = eligible_documents(catalog, pinned, tok["tokenizer_id"])
    samples, realised = select(docs, spec.components, spec.seed, spec.token_budget)
    by_id = {d["doc_id"]: d for d in docs}
    rows = [{"sample_index": i, "doc_id": s.doc_id, "repetition": s.repetition, "component": s.component,
             "n_tokens": s.n_tokens, "tokens_sha256": by_id[s.doc_id]["tokens_sha256"]} for i, s in enumerate(samples)]
    manifest = {
        "format": FORMAT,
        "name": spec.name,
        "tokenizer": {k: tok[k] for k in ("tokenizer_id", "name", "vocab_size", "eos_id", "token_dtype")},
        "inputs": pinned,
        "mixture": {"components": [c.as_dict() for c in spec.components], "token_budget": spec.token_budget,
                    "share_tolerance": spec.share_tolerance},
        "realised": [r.as_dict() for r in realised],
        "seed": spec.seed,
        "epoch_policy": {"epochs": spec.epochs, "shuffle": "block"},
        "packing": {"seq_len": spec.seq_len, "eos_id": tok["eos_id"],
                    "cross_document_attention": spec.cross_document_attention},
        "samples": {"n_samples": len(rows), "n_tokens": sum(r["n_tokens"] for r in rows),
                    "n_documents": len({r["doc_id"] for r in rows}), "sha256": samples_digest(rows)},
        "exclusions": exclusions,
        "quarantine": quarantine_report(catalog, pinned, (f"{by_id[s.doc_id]['crawl']}/{by_id[s.doc_id]['segment']}"
                                                          for s in samples), exclusions["eval_contaminated"]),
        "code_version": provenance.code_version,
        "config_hash": provenance.config_hash,
        "supersedes": supersedes,
    }
    sha = manifest_sha256(manifest)
    rv_id = run_view_id(spec.name, sha)
    existing = load_manifest(catalog, rv_id)
    if existing is not None:
        log.info("run view %s already exists (%s); not rewritten", rv_id, existing["status"])
        return CandidateResult(rv_id, sha, manifest, existing["status"], created=False, realised=realised)
    sample_writer = PartitionWriter(catalog, "run_view.samples", {"run_view_id": rv_id},
                                    catalog_fingerprint=catalog_fingerprint)
    for start in range(0, max(len(rows), 1), 65536):
        chunk = rows[start : start + 65536]
        sample_writer.write(pa.Table.from_pylist([{
            "run_view_id": rv_id, "sample_index": r["sample_index"], "doc_id": r["doc_id"],
            "record_id": by_id[r["doc_id"]]["record_id"], "deletion_key": by_id[r["doc_id"]]["deletion_key"],
            "tokenizer_id": tok["tokenizer_id"], "crawl": by_id[r["doc_id"]]["crawl"],
            "segment": by_id[r["doc_id"]]["segment"], "component": r["component"], "repetition": r["repetition"],
            "n_tokens": r["n_tokens"], "tokens_sha256": r["tokens_sha256"]} for r in chunk]))
    extra = {**provenance.extra, "run-view-id": rv_id}
    samples_commit = sample_writer.commit(_with(provenance, partition_key=rv_id, upstream=pinned, extra=extra))
    _write_manifest_row(catalog, {
        "run_view_id": rv_id, "name": spec.name, "status": "candidate", "manifest_sha256": sha,
        "manifest_json": canonical_json(manifest), "tokenizer_id": tok["tokenizer_id"], "seed": spec.seed,
        "n_samples": len(rows), "n_tokens": manifest["samples"]["n_tokens"], "created_at": _now(),
        "created_by_run_id": provenance.run_id, "reviewer": None, "decided_at": None, "decision_comment": None,
        "decided_by_run_id": None, "superseded_by_request": None, "supersedes": supersedes,
    }, _with(provenance, partition_key=rv_id, upstream=pinned, extra=extra), catalog_fingerprint)
    return CandidateResult(rv_id, sha, manifest, "candidate", created=True,
                           samples_snapshot_id=samples_commit.snapshot_id, realised=realised)


def _with(p: Provenance, partition_key: str, upstream: Mapping, extra: Mapping) -> Provenance:
    return Provenance(p.asset_key, partition_key, p.run_id, p.code_version, p.config_hash, dict(upstream), dict(extra))


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _write_manifest_row(catalog: Catalog, row: dict, provenance: Provenance, catalog_fingerprint: str) -> int | None:
    writer = PartitionWriter(catalog, "run_view.manifests", {"run_view_id": row["run_view_id"]},
                             catalog_fingerprint=catalog_fingerprint)
    writer.write(pa.Table.from_pylist([row]))
    return writer.commit(provenance).snapshot_id


def load_manifest(catalog: Catalog, run_view_id: str, snapshot_id: int | None = None) -> dict | None:
    """The manifests row of one run view (with `manifest` parsed), or None."""
    table = load_table(catalog, "run_view.manifests")
    if table.current_snapshot() is None:
        return None
    kwargs = {"snapshot_id": snapshot_id} if snapshot_id else {}
    rows = table.scan(row_filter=EqualTo("run_view_id", run_view_id), **kwargs).to_arrow().to_pylist()
    if not rows:
        return None
    row = rows[0]
    row["manifest"] = json.loads(row["manifest_json"])
    return row


def list_run_views(catalog: Catalog) -> list[dict]:
    """Every run view, newest first, without the manifest text."""
    table = load_table(catalog, "run_view.manifests")
    if table.current_snapshot() is None:
        return []
    fields = [f.name for f in table.schema().fields if f.name != "manifest_json"]
    rows = table.scan(selected_fields=tuple(fields)).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: r["created_at"], reverse=True)


def read_samples(catalog: Catalog, run_view_id: str, snapshot_id: int | None = None) -> pa.Table:
    """The view's samples in canonical order (from `snapshot_id`, e.g. the view's tag, or the current one)."""
    table = load_table(catalog, "run_view.samples")
    kwargs = {"snapshot_id": snapshot_id} if snapshot_id else {}
    t = table.scan(row_filter=EqualTo("run_view_id", run_view_id), **kwargs).to_arrow()
    return t.sort_by("sample_index")


# ---- checks: pure over what is stored; each returns a list of problems (empty = passed) ----

def check_non_empty(manifest: Mapping) -> list[str]:
    s = manifest["samples"]
    return [] if s["n_samples"] > 0 and s["n_tokens"] > 0 else [f"no samples ({s['n_samples']} samples, "
                                                                   f"{s['n_tokens']} tokens)"]


def check_shares(manifest: Mapping) -> list[str]:
    realised = [Realised(**r) for r in manifest["realised"]]
    return within_tolerance(realised, manifest["mixture"]["share_tolerance"])


def check_checksums(catalog: Catalog, run_view_id: str, manifest: Mapping) -> tuple[int, list[dict]]:
    """Every selected row re-read at the pinned snapshot: checksum, count, final EOS, and the same sha256 as
    recorded in the samples. Returns (rows verified, problems naming doc_ids)."""
    samples = read_samples(catalog, run_view_id)
    problems: list[dict] = []
    if samples_digest(samples.to_pylist()) != manifest["samples"]["sha256"]:
        problems.append({"doc_id": "*", "problem": "stored samples differ from the manifest's samples digest"})
    want = dict(zip(samples["doc_id"].to_pylist(), samples["tokens_sha256"].to_pylist()))
    # one pass over the view's partitions at the pinned snapshot (an In() filter per chunk would rescan them)
    segments = sorted(set(zip(samples["crawl"].to_pylist(), samples["segment"].to_pylist())))
    where = EqualTo("tokenizer_id", manifest["tokenizer"]["tokenizer_id"])
    if segments:
        where = And(where, Or(*[And(EqualTo("crawl", c), EqualTo("segment", g)) for c, g in segments])
                    if len(segments) > 1 else And(EqualTo("crawl", segments[0][0]), EqualTo("segment", segments[0][1])))
    reader = load_table(catalog, "tokenized.documents").scan(
        row_filter=where, selected_fields=("doc_id", "tokens", "token_dtype", "n_tokens", "tokens_sha256"),
        snapshot_id=manifest["inputs"]["tokenized.documents"]).to_arrow_batch_reader()
    wanted = pa.array(sorted(want))
    found: set[str] = set()
    for batch in reader:
        rows = batch.filter(pc.is_in(batch.column("doc_id"), value_set=wanted)).to_pylist()
        found.update(r["doc_id"] for r in rows)
        problems += check_rows(rows)
        problems += [{"doc_id": r["doc_id"], "problem": "tokens_sha256 differs from the sample's"}
                     for r in rows if r["tokens_sha256"] != want[r["doc_id"]]]
    problems += [{"doc_id": d, "problem": "missing at the pinned snapshot"} for d in sorted(set(want) - found)]
    verified = len(found)
    return verified, problems


def check_quarantine(catalog: Catalog, run_view_id: str, manifest: Mapping) -> list[str]:
    """No selected document in quarantine.matches (at the pinned snapshot, nor now), and every segment of the
    view screened against every registered benchmark."""
    doc_ids = set(read_samples(catalog, run_view_id).column("doc_id").to_pylist())
    problems = []
    for label, sid in (("pinned", manifest["inputs"]["quarantine.matches"]),
                       ("current", snapshot_ids(catalog, ("quarantine.matches",))["quarantine.matches"])):
        if sid is None:
            continue
        found = load_table(catalog, "quarantine.matches").scan(
            selected_fields=("doc_id", "benchmark"), snapshot_id=sid).to_arrow().to_pylist()
        hits = sorted({(r["doc_id"], r["benchmark"]) for r in found if r["doc_id"] in doc_ids})
        problems += [f"{d} matches {b} ({label} quarantine.matches)" for d, b in hits]
    q = manifest["quarantine"]
    if not q["benchmarks"]:
        problems.append("no benchmark registered in quarantine.eval_items: nothing was screened")
    problems += [f"segment {s} not screened against {b}" for b, s in q["missing_pairs"]]
    return problems


# ---- the gate ----

def decide(catalog: Catalog, run_view_id: str, sha256: str, reviewer: str, decision: str, comment: str,
           check_results: Mapping[str, bool | None], provenance: Provenance, catalog_fingerprint: str = "") -> dict:
    """Approve or reject a candidate. Refuses (RunViewRefused subclasses) an unknown id, a stale hash, a view
    already decided, missing or failed checks. Returns the updated manifests row."""
    if decision not in ("approve", "reject"):
        raise ValueError(f"decision must be 'approve' or 'reject', got {decision!r}")
    if not reviewer.strip():
        raise ValueError("reviewer is required: name the person who reviewed the manifest")
    row = load_manifest(catalog, run_view_id)
    if row is None:
        known = [r["run_view_id"] for r in list_run_views(catalog) if r["status"] == "candidate"]
        raise UnknownRunView(f"unknown run view {run_view_id!r}; candidates: {known or 'none'}")
    if row["manifest_sha256"] != sha256:
        raise StaleManifest(f"run view {run_view_id}: manifest_sha256 {sha256!r} does not match the stored "
                            f"{row['manifest_sha256']!r}; review the current manifest and use its hash")
    if row["status"] != "candidate":
        raise AlreadyDecided(f"run view {run_view_id} is already {row['status']!r} (by {row['reviewer'] or '-'} at "
                             f"{row['decided_at'] or '-'}); a published or rejected view is never changed: build a new "
                             f"candidate")
    if decision == "approve":
        failing = {name: check_results.get(name) for name in CHECKS if check_results.get(name) is not True}
        if failing:
            detail = ", ".join(f"{k}: {'not evaluated' if v is None else 'failed'}" for k, v in failing.items())
            raise ChecksNotPassed(f"run view {run_view_id} cannot be published: {detail}; re-materialise "
                                  f"run_view/candidate with its checks and fix what they report")
        tag_pinned_snapshots(catalog, row, catalog_fingerprint)
    updated = {k: v for k, v in row.items() if k != "manifest"}
    updated.update(status="published" if decision == "approve" else "rejected", reviewer=reviewer.strip(),
                   decided_at=_now(), decision_comment=comment, decided_by_run_id=provenance.run_id)
    _write_manifest_row(catalog, updated, _with(provenance, run_view_id, {}, {
        **provenance.extra, "run-view-id": run_view_id, "decision": decision, "reviewer": reviewer.strip()}),
        catalog_fingerprint)
    return updated


def tag_pinned_snapshots(catalog: Catalog, row: Mapping, catalog_fingerprint: str = "") -> dict[str, int]:
    """Tag `runview-<id>` on every pinned input snapshot and on the run_view.samples snapshot holding the
    view's rows (verified against the manifest's digest first). Idempotent."""
    manifest = row["manifest"] if "manifest" in row else json.loads(row["manifest_json"])
    rv_id = row["run_view_id"]
    samples_table = load_table(catalog, "run_view.samples")
    current = samples_table.current_snapshot()
    stored = read_samples(catalog, rv_id, current.snapshot_id if current else None)
    if samples_digest(stored.to_pylist()) != manifest["samples"]["sha256"]:
        raise IntegrityError(f"run view {rv_id}: run_view.samples does not hold the rows the manifest hashed")
    targets = {ident: sid for ident, sid in manifest["inputs"].items() if sid is not None}
    targets["run_view.samples"] = current.snapshot_id
    name = tag_name(rv_id)
    for ident, sid in sorted(targets.items()):
        with table_commit_lock(catalog_fingerprint, ident):
            table = load_table(catalog, ident)
            ref = table.metadata.refs.get(name)
            if ref is not None:
                if ref.snapshot_id != sid:
                    raise IntegrityError(f"{ident} already has tag {name} on snapshot {ref.snapshot_id}, not {sid}")
                continue
            table.manage_snapshots().create_tag(snapshot_id=sid, tag_name=name).commit()
    return targets


def set_status(catalog: Catalog, run_view_id: str, provenance: Provenance, catalog_fingerprint: str = "",
               **changes) -> dict:
    """Rewrite one view's lifecycle columns (status, superseded_by_request, ...); the frozen manifest stays."""
    row = load_manifest(catalog, run_view_id)
    if row is None:
        raise UnknownRunView(f"unknown run view {run_view_id!r}")
    frozen = {"manifest_json", "manifest_sha256", "run_view_id", "name", "tokenizer_id", "seed", "n_samples",
              "n_tokens", "created_at", "created_by_run_id"}
    if frozen & set(changes):
        raise ValueError(f"the frozen columns {sorted(frozen & set(changes))} of a run view never change")
    if "status" in changes and changes["status"] not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {changes['status']!r}")
    updated = {k: v for k, v in row.items() if k != "manifest"}
    updated.update(changes)
    _write_manifest_row(catalog, updated, _with(provenance, run_view_id, {}, {**provenance.extra,
                                                                               "run-view-id": run_view_id}),
                        catalog_fingerprint)
    return updated
