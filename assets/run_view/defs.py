"""Run view assets and the approval gate.

`run_view/candidate` builds a candidate from its config (mixture, seed, epoch policy, packing, tokenizer) at
the current snapshots of its inputs; four blocking checks verify it. The `publish_run_view` job (launched
from the Launchpad, or by `tokenlake runview approve`) is the only way a view becomes `published`: its config
names the view, the manifest hash the reviewer saw, the reviewer and the decision.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

from typing import Optional

import dagster as dg

from assets.governance.propagate import erasure
from assets.curated.defs import DOCUMENTS, EXACT_DUPLICATES
from assets.dedup.defs import NEAR_DUPLICATES
from assets.lakehouse import md_table, provenance
from assets.plots import paired_bars_markdown
from assets.quarantine.defs import EVAL_ITEMS, MATCHES
from assets.run_view import store
from assets.run_view.mixture import Component
from assets.tokenized.defs import TOKENIZED_DOCUMENTS, TOKENIZERS
from iceberg_catalog import Provenance, config_hash
from resources import IcebergCatalogResource

CANDIDATE = dg.AssetKey(["run_view", "candidate"])
GATE_CODE_VERSION = "publish-1"


class ComponentConfig(dg.Config):
    """A mixture component: documents whose label columns match every filter; `weight` is a token share."""

    name: str
    weight: float
    filters: dict[str, list[str]] = {}
    max_repetitions: int = 1


class RunViewConfig(dg.Config):
    """A run view candidate. `token_budget` null = as many tokens as the mixture allows; `epochs` null =
    unbounded; `share_tolerance` is the allowed |realised - requested| token share (0.01 = 1 point)."""

    name: str = "demo"
    tokenizer: str = "gpt2"
    components: list[ComponentConfig] = [{"name": "all", "weight": 1.0}]
    token_budget: Optional[int] = None
    seed: int = 0
    epochs: Optional[int] = None
    seq_len: int = 2048
    cross_document_attention: str = "masked"
    share_tolerance: float = 0.01
    # a superseded run view to rebuild on the current inputs with its own config (the fields above are ignored)
    rebuild_of: Optional[str] = None

    def spec(self) -> store.RunViewSpec:
        return store.RunViewSpec(
            name=self.name, tokenizer=self.tokenizer, seed=self.seed, token_budget=self.token_budget,
            epochs=self.epochs, seq_len=self.seq_len, cross_document_attention=self.cross_document_attention,
            share_tolerance=self.share_tolerance,
            components=[_component(c) for c in self.components])


def _component(c) -> Component:
    c = ComponentConfig(**c) if isinstance(c, dict) else c  # the default arrives as a plain dict
    return Component(c.name, c.weight, c.filters, c.max_repetitions)


@dg.asset(
    key=CANDIDATE,
    metadata=erasure(("run_view.samples", ["doc_id", "record_id", "deletion_key"]), run_views=True),
    deps=[TOKENIZED_DOCUMENTS, TOKENIZERS, DOCUMENTS, EXACT_DUPLICATES, NEAR_DUPLICATES, EVAL_ITEMS, MATCHES],
    group_name="run_view",
    code_version="run-view-1",
    kinds={"iceberg"},
    pool="iceberg_run_view",
    description="A run view candidate: tokenized documents selected by the mixture at pinned input snapshots "
                "(kept, not duplicated, not quarantined), in canonical order (run_view.samples), and its frozen "
                "manifest with status `candidate` (run_view.manifests). Publish with the publish_run_view job.",
)
def candidate(context: dg.AssetExecutionContext, config: RunViewConfig,
              catalog: IcebergCatalogResource) -> dg.MaterializeResult:
    spec = config.spec()
    if config.rebuild_of:
        old = store.load_manifest(catalog.catalog(), config.rebuild_of)
        if old is None:
            raise dg.Failure(f"rebuild_of: unknown run view {config.rebuild_of!r}")
        spec = store.spec_from_manifest(old["manifest"])
        context.log.info("rebuilding %s (%s) on the current inputs", config.rebuild_of, old["status"])
    result = store.build_candidate(catalog.catalog(), spec, provenance(context, CANDIDATE, spec.config()),
                                   catalog.config.fingerprint(), supersedes=config.rebuild_of)
    m = result.manifest
    context.log.info("run view %s (%s): %d samples, %d tokens, sha256 %s", result.run_view_id, result.status,
                     m["samples"]["n_samples"], m["samples"]["n_tokens"], result.manifest_sha256)
    realised = m["realised"]
    return dg.MaterializeResult(metadata={
        "run_view_id": result.run_view_id,
        "manifest_sha256": result.manifest_sha256,
        "status": result.status,
        "newly_created": result.created,
        "supersedes": config.rebuild_of or "",
        "dagster/row_count": m["samples"]["n_samples"],
        "n_tokens": m["samples"]["n_tokens"],
        "n_documents": m["samples"]["n_documents"],
        "mixture": md_table(
            ["component", "requested share", "realised token share", "document share", "tokens", "documents",
             "pool tokens", "passes"],
            [[r["component"], f"{r['requested_share']:.2%}", f"{r['token_share']:.2%}", f"{r['document_share']:.2%}",
              f"{r['tokens']:,}", r["documents"], f"{r['pool_tokens']:,}", r["repetitions"]] for r in realised]),
        "requested_vs_realised": dg.MetadataValue.md(paired_bars_markdown(
            [r["component"] for r in realised], [r["requested_share"] for r in realised],
            [r["token_share"] for r in realised], "token share per component")),
        "exclusions": dg.MetadataValue.json(m["exclusions"]),
        "quarantine": dg.MetadataValue.json(m["quarantine"]),
        "inputs": dg.MetadataValue.json(m["inputs"]),
        "manifest_summary": dg.MetadataValue.json({k: m[k] for k in ("tokenizer", "seed", "epoch_policy", "packing",
                                                                     "samples", "code_version", "config_hash")}),
        "to_publish": dg.MetadataValue.md(
            f"Review, then launch job **publish_run_view** with `run_view_id: {result.run_view_id}`, "
            f"`manifest_sha256: {result.manifest_sha256}`, your name as `reviewer` and `decision: approve` "
            f"(or `reject` with a comment)."),
    })


def _candidate_under_check(context: dg.AssetCheckExecutionContext, catalog: IcebergCatalogResource):
    """The run view the latest materialisation of run_view/candidate wrote, with its manifest row."""
    event = context.instance.get_latest_materialization_event(CANDIDATE)
    if event is None or event.asset_materialization is None:
        raise dg.Failure("run_view/candidate has never been materialised")
    rv_id = event.asset_materialization.metadata["run_view_id"].value
    row = store.load_manifest(catalog.catalog(), rv_id)
    if row is None:
        raise dg.Failure(f"run view {rv_id} from the latest materialisation is not in run_view.manifests")
    return rv_id, row


def _result(rv_id: str, row: dict, problems: list, **metadata) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=not problems, severity=dg.AssetCheckSeverity.ERROR, metadata={
        "run_view_id": rv_id, "manifest_sha256": row["manifest_sha256"], "problems": len(problems),
        "details": dg.MetadataValue.json(problems[:50]), **metadata})


@dg.asset_check(asset=CANDIDATE, name="non_empty", blocking=True,
                description="The candidate selects at least one document and one token.")
def non_empty(context: dg.AssetCheckExecutionContext, catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    rv_id, row = _candidate_under_check(context, catalog)
    return _result(rv_id, row, store.check_non_empty(row["manifest"]), n_samples=row["n_samples"])


@dg.asset_check(asset=CANDIDATE, name="checksums_verified", blocking=True,
                description="Every selected row re-read from tokenized.documents at the pinned snapshot: sha256, "
                            "token count, final EOS, and the samples' digest against the manifest.")
def checksums_verified(context: dg.AssetCheckExecutionContext,
                       catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    rv_id, row = _candidate_under_check(context, catalog)
    verified, problems = store.check_checksums(catalog.catalog(), rv_id, row["manifest"])
    return _result(rv_id, row, problems, rows_verified=verified)


@dg.asset_check(asset=CANDIDATE, name="shares_within_tolerance", blocking=True,
                description="Each component's realised token share is within share_tolerance of the request.")
def shares_within_tolerance(context: dg.AssetCheckExecutionContext,
                            catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    rv_id, row = _candidate_under_check(context, catalog)
    return _result(rv_id, row, store.check_shares(row["manifest"]),
                   tolerance=row["manifest"]["mixture"]["share_tolerance"])


@dg.asset_check(asset=CANDIDATE, name="quarantine_clean", blocking=True,
                description="No selected document is in quarantine.matches (pinned or current), and every segment "
                            "of the view was screened against every registered benchmark.")
def quarantine_clean(context: dg.AssetCheckExecutionContext, catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    rv_id, row = _candidate_under_check(context, catalog)
    q = row["manifest"]["quarantine"]
    return _result(rv_id, row, store.check_quarantine(catalog.catalog(), rv_id, row["manifest"]),
                   benchmarks=dg.MetadataValue.json(q["benchmarks"]), segments=len(q["segments"]))


def check_results_for(instance: dg.DagsterInstance, run_view_id: str, history: int = 500) -> dict[str, bool | None]:
    """The latest evaluation of each blocking check for this run view (None: never evaluated for it), read
    from the instance's event log: the gate trusts Dagster's record, not the caller."""
    out: dict[str, bool | None] = {}
    for name in store.CHECKS:
        out[name] = None
        records = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(CANDIDATE, name), limit=history)
        for rec in records:  # newest first
            evaluation = rec.event.asset_check_evaluation if rec.event else None
            if evaluation is None:
                continue
            value = evaluation.metadata.get("run_view_id")
            if value is not None and value.value == run_view_id:
                out[name] = bool(evaluation.passed)
                break
    return out


class DecisionConfig(dg.Config):
    """A reviewer's decision on a candidate. `manifest_sha256` must be the hash shown on the candidate's
    materialisation: a decision on a manifest the reviewer did not see is refused."""

    run_view_id: str
    manifest_sha256: str
    reviewer: str
    decision: str  # approve | reject
    comment: str = ""


@dg.op(description="Approve or reject a run view candidate; approval tags every pinned input snapshot "
                   "`runview-<id>` and sets status published.")
def decide_run_view(context: dg.OpExecutionContext, config: DecisionConfig,
                    catalog: IcebergCatalogResource) -> dg.Output:
    checks = check_results_for(context.instance, config.run_view_id)
    context.log.info("checks of %s: %s", config.run_view_id, checks)
    prov = Provenance("run_view/manifests", config.run_view_id, context.run_id, GATE_CODE_VERSION,
                      config_hash(config.model_dump()), {}, {"gate": "publish_run_view"})
    try:
        row = store.decide(catalog.catalog(), config.run_view_id, config.manifest_sha256, config.reviewer,
                           config.decision, config.comment, checks, prov, catalog.config.fingerprint())
    except (store.RunViewRefused, ValueError) as exc:
        raise dg.Failure(description=f"{type(exc).__name__}: {exc}",
                         metadata={"run_view_id": config.run_view_id, "refusal": type(exc).__name__}) from exc
    context.log.info("run view %s is %s (reviewer %s)", row["run_view_id"], row["status"], row["reviewer"])
    return dg.Output(row["status"], metadata={
        "run_view_id": row["run_view_id"], "status": row["status"], "reviewer": row["reviewer"],
        "decided_at": row["decided_at"].isoformat(), "checks": dg.MetadataValue.json(checks)})


@dg.job(description="The approval gate: a reviewer publishes (or rejects) a run view candidate. Launch from the "
                    "Launchpad with run_view_id, manifest_sha256, reviewer, decision (approve | reject), comment.",
        tags={"tokenlake/gate": "run_view"}, executor_def=dg.in_process_executor)
def publish_run_view():
    decide_run_view()


assets = [candidate]
asset_checks = [non_empty, checksums_verified, shares_within_tolerance, quarantine_clean]
jobs = [publish_run_view]
