"""Run views: the `run_view/candidate` asset with its four blocking checks, and the approval gate (the
`publish_run_view` job, the only way a view becomes `published`). See README.md.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import dataclasses
from functools import partial
from typing import Any, Optional

import dagster as dg
import pydantic

from assets import shell
from assets.curated import domain
from assets.identity import authenticated_user, recorded, require_authenticated
from assets.plots import paired_bars_markdown
from assets.run_view import policy as mixture_policy
from assets.run_view import store
from assets.run_view.mixture import Component, refuse_unvalidated_domains
from assets.shell import md_table, provenance, run_tasks, table_key
from iceberg_catalog import Lakehouse, Provenance, config_hash
from iceberg_catalog import schemas as T
from iceberg_catalog.erasure import erasure
from iceberg_catalog.run_view_contract import Manifest
from resources import IcebergCatalogResource
from resources.executor import TaskExecutorResource

CANDIDATE = dg.AssetKey(["run_view", "candidate"])  # writes two tables: a key of its own
# the tables a candidate reads whose writers it depends on (store.INPUT_TABLES; quarantine.screenings is written
# by the quarantine/matches asset)
UPSTREAM = (
    T.TOKENIZED_DOCUMENTS,
    T.TOKENIZED_TOKENIZERS,
    T.CURATED_DOCUMENTS,
    T.CURATED_EXACT_DUPLICATES,
    T.DEDUP_NEAR_DUPLICATES,
    T.QUARANTINE_EVAL_ITEMS,
    T.QUARANTINE_MATCHES,
)
CODE_VERSION = "run-view-2"
GATE_CODE_VERSION = "publish-1"


def _knob(dc: type, name: str, default: Any = ...) -> Any:
    """A Launchpad field with the explanation, and unless `default` is given the default, that the pure
    dataclass declares for `name` (one definition per knob); `...` = required."""
    f = next(f for f in dataclasses.fields(dc) if f.name == name)
    if default is ...:
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else ...)
        )
    return pydantic.Field(default=default, description=f.metadata["doc"])


class ComponentConfig(dg.Config):
    """A mixture component: documents whose label columns match every filter; `weight` is a token share."""

    name: str = _knob(Component, "name")
    weight: float = _knob(Component, "weight")
    filters: dict[str, list[str]] = _knob(Component, "filters")
    max_repetitions: int = _knob(Component, "max_repetitions")


class RunViewConfig(dg.Config):
    """A run view candidate (mixture, seed, epoch policy, packing, tokenizer), or the rebuild of a superseded
    view with its own configuration."""

    name: str = _knob(store.RunViewSpec, "name")
    tokenizer: str = _knob(store.RunViewSpec, "tokenizer")
    components: list[ComponentConfig] = _knob(
        store.RunViewSpec, "components", [dataclasses.asdict(c) for c in store.RunViewSpec().components]
    )
    token_budget: Optional[int] = _knob(store.RunViewSpec, "token_budget")
    seed: int = _knob(store.RunViewSpec, "seed")
    epochs: Optional[int] = _knob(store.RunViewSpec, "epochs")
    seq_len: int = _knob(store.RunViewSpec, "seq_len")
    cross_document_attention: str = _knob(store.RunViewSpec, "cross_document_attention")
    share_tolerance: float = _knob(store.RunViewSpec, "share_tolerance")
    split: Optional[str] = _knob(store.RunViewSpec, "split")
    validation_fraction: float = _knob(store.RunViewSpec, "validation_fraction")
    test_fraction: float = _knob(store.RunViewSpec, "test_fraction")
    split_seed: int = _knob(store.RunViewSpec, "split_seed")
    semantic_threshold: Optional[float] = _knob(store.RunViewSpec, "semantic_threshold")
    rebuild_of: Optional[str] = pydantic.Field(
        default=None,
        description=(
            "A superseded run view to rebuild on the current inputs with its own configuration (the fields above "
            "are then ignored); the superseded_run_views sensor sets it."
        ),
    )

    def spec(self) -> store.RunViewSpec:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(store.RunViewSpec)}
        return store.RunViewSpec(**{**values, "components": tuple(_component(c) for c in self.components)})


def _component(c) -> Component:
    c = ComponentConfig(**c) if isinstance(c, dict) else c  # the default arrives as a plain dict
    return Component(c.name, c.weight, c.filters, c.max_repetitions)


def governed_spec(lakehouse: Lakehouse, spec: store.RunViewSpec) -> tuple[store.RunViewSpec, dict]:
    """The spec with the active mixture policy's components (unless the config's components are an ad-hoc
    experiment) and the snapshot properties naming the policy (`mixture/<n>` or `mixture/adhoc`)."""
    components, stamp = mixture_policy.governed_mixture(lakehouse, [c.as_dict() for c in spec.components])
    return dataclasses.replace(spec, components=tuple(Component(**c) for c in components)), stamp


def rebuild_spec(
    context: dg.AssetExecutionContext, lakehouse: Lakehouse, run_view_id: str
) -> tuple[store.RunViewSpec, dict]:
    """The configuration a superseded view was built with (to rebuild it on the current inputs), and the
    mixture policy it was built under (ad hoc when its manifest names none)."""
    old = store.load_manifest(lakehouse, run_view_id)
    if old is None:
        raise dg.Failure(f"rebuild_of: unknown run view {run_view_id!r}")
    context.log.info("rebuilding %s (%s) on the current inputs", run_view_id, old["status"])
    spec = store.spec_from_manifest(old["manifest"])
    return spec, mixture_policy.rebuild_stamp(old["manifest"].get("policy"), spec)


def refuse_unvalidated_domain_filters(spec: store.RunViewSpec) -> None:
    """Mixtures must not filter on a domain class under its precision floor on held-out real pages (the domain
    validation's blocking check); the classifier is evaluated only when a component filters on domain_class."""
    if any(c.filters.get("domain_class") for c in spec.components):
        params = domain.DomainValidationParams()
        refuse_unvalidated_domains(spec.components, domain.unvalidated_classes(params), params.min_precision)


@dg.asset(
    key=CANDIDATE,
    metadata={
        "iceberg_tables": [T.RUN_VIEW_SAMPLES.identifier, T.RUN_VIEW_MANIFESTS.identifier],
        **erasure((T.RUN_VIEW_SAMPLES, ["doc_id", "record_id", "deletion_key"]), run_views=True),
    },
    deps=[table_key(t) for t in UPSTREAM],
    group_name="run_view",
    code_version=CODE_VERSION,
    kinds={"iceberg"},
    pool="iceberg_run_view",
)
def candidate(
    context: dg.AssetExecutionContext,
    config: RunViewConfig,
    catalog: IcebergCatalogResource,
    executor: TaskExecutorResource,
) -> dg.MaterializeResult:
    """A run view candidate: tokenized documents selected by the mixture at pinned input snapshots (kept, not
    duplicated, not quarantined), in canonical order (run_view.samples), and its frozen manifest with status
    `candidate` (run_view.manifests), selected and written as tasks on the executor. Publish it with the
    publish_run_view job."""
    lakehouse = catalog.lakehouse()
    if config.rebuild_of:
        spec, stamp = rebuild_spec(context, lakehouse, config.rebuild_of)
    else:
        spec, stamp = governed_spec(lakehouse, config.spec())
    refuse_unvalidated_domain_filters(spec)
    prov = provenance(context, CANDIDATE, spec.config(), extra=stamp)
    policy = mixture_policy.manifest_policy(stamp)
    tasks = partial(run_tasks, context, executor.executor())
    result = store.build_candidate(lakehouse, spec, prov, supersedes=config.rebuild_of, policy=policy, executor=tasks)
    m = Manifest.from_dict(result.manifest)
    context.log.info(
        "run view %s (%s): %d samples, %d tokens, sha256 %s",
        result.run_view_id,
        result.status,
        m.n_samples,
        m.n_tokens,
        result.manifest_sha256,
    )
    return dg.MaterializeResult(metadata=candidate_metadata(result, config.rebuild_of))


def candidate_metadata(result: store.CandidateResult, rebuild_of: Optional[str]) -> dict:
    """What a reviewer looks at on the candidate's materialisation: the mixture, exclusions, inputs, the hash."""
    m, d = Manifest.from_dict(result.manifest), result.manifest  # typed fields; the dict for JSON metadata
    realised = m.realised
    return {
        "run_view_id": result.run_view_id,
        "manifest_sha256": result.manifest_sha256,
        "status": result.status,
        "newly_created": result.created,
        "supersedes": rebuild_of or "",
        "policy_version": (m.policy or {}).get("version", ""),
        "dagster/row_count": m.n_samples,
        "n_tokens": m.n_tokens,
        "n_documents": m.n_documents,
        "mixture": md_table(
            [
                "component",
                "requested share",
                "realised token share",
                "document share",
                "tokens",
                "documents",
                "pool tokens",
                "passes",
            ],
            [
                [
                    r["component"],
                    f"{r['requested_share']:.2%}",
                    f"{r['token_share']:.2%}",
                    f"{r['document_share']:.2%}",
                    f"{r['tokens']:,}",
                    r["documents"],
                    f"{r['pool_tokens']:,}",
                    r["repetitions"],
                ]
                for r in realised
            ],
        ),
        "requested_vs_realised": dg.MetadataValue.md(
            paired_bars_markdown(
                [r["component"] for r in realised],
                [r["requested_share"] for r in realised],
                [r["token_share"] for r in realised],
                "token share per component",
            )
        ),
        "exclusions": dg.MetadataValue.json(d["exclusions"]),
        "quarantine": dg.MetadataValue.json(d["quarantine"]),
        "inputs": dg.MetadataValue.json(d["inputs"]),
        "manifest_summary": dg.MetadataValue.json(
            {
                k: d[k]
                for k in ("tokenizer", "seed", "epoch_policy", "packing", "samples", "code_version", "config_hash")
            }
        ),
        "to_publish": dg.MetadataValue.md(
            f"Review, then launch job **publish_run_view** with `run_view_id: {result.run_view_id}`, "
            f"`manifest_sha256: {result.manifest_sha256}`, your name as `reviewer` and `decision: approve` "
            f"(or `reject` with a comment)."
        ),
    }


# ---- the four blocking checks ----


def _candidate_under_check(context: dg.AssetCheckExecutionContext, lakehouse: Lakehouse) -> tuple[str, dict]:
    """The run view the latest materialisation of run_view/candidate wrote, with its manifest row."""
    event = context.instance.get_latest_materialization_event(CANDIDATE)
    if event is None or event.asset_materialization is None:
        raise dg.Failure("run_view/candidate has never been materialised")
    rv_id = event.asset_materialization.metadata["run_view_id"].value
    row = store.load_manifest(lakehouse, rv_id)
    if row is None:
        raise dg.Failure(f"run view {rv_id} from the latest materialisation is not in {T.RUN_VIEW_MANIFESTS}")
    return rv_id, row


def _result(rv_id: str, row: dict, problems: list, **metadata) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "run_view_id": rv_id,
            "manifest_sha256": row["manifest_sha256"],
            "problems": len(problems),
            "details": dg.MetadataValue.json(problems[:50]),
            **metadata,
        },
    )


@dg.asset_check(asset=CANDIDATE, name="non_empty", blocking=True)
def non_empty(context: dg.AssetCheckExecutionContext, catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    """The candidate selects at least one document and one token."""
    rv_id, row = _candidate_under_check(context, catalog.lakehouse())
    return _result(rv_id, row, store.check_non_empty(row["manifest"]), n_samples=row["n_samples"])


@dg.asset_check(asset=CANDIDATE, name="checksums_verified", blocking=True)
def checksums_verified(context: dg.AssetCheckExecutionContext, catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    """Every selected row re-read from tokenized.documents at the pinned snapshot: tokens against their
    sha256, token count, the sample's recorded sha256, and the samples' digest against the manifest."""
    lakehouse = catalog.lakehouse()
    rv_id, row = _candidate_under_check(context, lakehouse)
    verified, problems = store.check_checksums(lakehouse, rv_id, row["manifest"])
    return _result(rv_id, row, problems, rows_verified=verified)


@dg.asset_check(asset=CANDIDATE, name="shares_within_tolerance", blocking=True)
def shares_within_tolerance(
    context: dg.AssetCheckExecutionContext, catalog: IcebergCatalogResource
) -> dg.AssetCheckResult:
    """Each component's realised token share is within share_tolerance of the request."""
    rv_id, row = _candidate_under_check(context, catalog.lakehouse())
    return _result(
        rv_id, row, store.check_shares(row["manifest"]), tolerance=row["manifest"]["mixture"]["share_tolerance"]
    )


@dg.asset_check(asset=CANDIDATE, name="quarantine_clean", blocking=True)
def quarantine_clean(context: dg.AssetCheckExecutionContext, catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    """No selected document is in quarantine.matches (pinned or current), and every segment of the view was
    screened against every registered benchmark."""
    lakehouse = catalog.lakehouse()
    rv_id, row = _candidate_under_check(context, lakehouse)
    q = row["manifest"]["quarantine"]
    return _result(
        rv_id,
        row,
        store.check_quarantine(lakehouse, rv_id, row["manifest"]),
        benchmarks=dg.MetadataValue.json(q["benchmarks"]),
        segments=len(q["segments"]),
    )


run_view_candidate_job = shell.asset_job(
    "run_view_candidate",
    CANDIDATE,
    description="Build a run view candidate from its config (mixture, seed, packing) and run its blocking checks; "
    "then a reviewer publishes it with the publish_run_view job.",
)


# ---- the approval gate ----


def check_results_for(instance: dg.DagsterInstance, run_view_id: str, history: int = 500) -> dict[str, bool | None]:
    """The latest evaluation of each blocking check for this run view (None: never evaluated for it), read
    from the instance's event log: the gate trusts Dagster's record, not the caller."""
    out: dict[str, bool | None] = {}
    for name in store.CHECKS:
        out[name] = None
        records = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(CANDIDATE, name), limit=history
        )
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
    """A reviewer's decision on a candidate: a decision on a manifest the reviewer did not see is refused."""

    run_view_id: str = pydantic.Field(description="The candidate's id, as shown on its materialisation.")
    manifest_sha256: str = pydantic.Field(
        description=("The manifest hash shown on the candidate's materialisation: the manifest you reviewed.")
    )
    reviewer: str = pydantic.Field(
        description="Your name: recorded on the run view (it must be the user your deployment authenticated, "
        "where it tags the run with one)."
    )
    decision: str = pydantic.Field(description="approve | reject")
    comment: str = pydantic.Field(default="", description="Why (recorded with the decision).")


@dg.op
def decide_run_view(
    context: dg.OpExecutionContext, config: DecisionConfig, catalog: IcebergCatalogResource
) -> dg.Output:
    """Approve or reject a run view candidate; approval tags every pinned input snapshot `runview-<id>` and
    sets status published. The user the deployment authenticated for the run (a run tag, `assets.identity`)
    must be the reviewer and is recorded next to them."""
    checks = check_results_for(context.instance, config.run_view_id)
    context.log.info("checks of %s: %s", config.run_view_id, checks)
    who = authenticated_user(context.run.tags)
    decision = (config.run_view_id, config.manifest_sha256, config.reviewer, config.decision, config.comment)
    try:
        require_authenticated(config.reviewer, who)
        row = store.decide(catalog.lakehouse(), *decision, checks, gate_provenance(context, config, who))
    except (store.RunViewRefused, ValueError) as exc:
        refusal = {"run_view_id": config.run_view_id, "refusal": type(exc).__name__}
        raise dg.Failure(description=f"{type(exc).__name__}: {exc}", metadata=refusal) from exc
    context.log.info("run view %s is %s (reviewer %s)", row["run_view_id"], row["status"], row["reviewer"])
    return dg.Output(row["status"], metadata=decision_metadata(row, checks, who))


def gate_provenance(context: dg.OpExecutionContext, config: DecisionConfig, who: str | None) -> Provenance:
    """What the manifests snapshot of a decision records: the gate's run, code version and config, and the
    authenticated user `who` where the run has one."""
    return Provenance(
        "run_view/manifests",
        config.run_view_id,
        context.run_id,
        GATE_CODE_VERSION,
        config_hash(config.model_dump()),
        {},
        {"gate": "publish_run_view", **recorded(who)},
    )


def decision_metadata(row: dict, checks: dict, who: str | None) -> dict:
    """The decision as the run's output metadata (the authenticated user next to the reviewer, if any)."""
    return {
        "run_view_id": row["run_view_id"],
        "status": row["status"],
        "reviewer": row["reviewer"],
        **({"authenticated_user": who} if who else {}),
        "decided_at": row["decided_at"].isoformat(),
        "checks": dg.MetadataValue.json(checks),
    }


@dg.job(tags={"tokenlake/gate": "run_view"}, executor_def=dg.in_process_executor)
def publish_run_view():
    """The approval gate: a reviewer publishes (or rejects) a run view candidate. Launch from the Launchpad
    with run_view_id, manifest_sha256, reviewer, decision (approve | reject), comment."""
    decide_run_view()


defs = dg.Definitions(
    assets=[candidate],
    asset_checks=[non_empty, checksums_verified, shares_within_tolerance, quarantine_clean],
    jobs=[run_view_candidate_job, publish_run_view],
)
