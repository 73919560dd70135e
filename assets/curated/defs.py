"""Curated: the reference LM, language-ID validation, the domain classifier and its validation, curated documents,
exact duplicates, and their jobs.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import hashlib
import time
from pathlib import Path

import dagster as dg

from assets import shell
from assets.curated import curate, domain, models
from assets.curated.ngram_lm import build_reference_lm
from assets.curated.pipeline import CurateParams
from assets.curated.policy import governed_params, thresholds_stamp
from assets.partitions import crawl_segments
from assets.plots import histogram_markdown
from assets.shell import config_from, md_table, params_from, provenance, run_tasks, table_key
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    CURATED_LANGID_VALIDATION,
    RAW_WARC_RECORDS,
)
from resources import IcebergCatalogResource, LanguageModelResource, parse_partition_key, reference_lm_path
from resources.executor import TaskExecutorResource

LANGID_VALIDATION = table_key(CURATED_LANGID_VALIDATION)
DOCUMENTS = table_key(CURATED_DOCUMENTS)
EXACT_DUPLICATES = table_key(CURATED_EXACT_DUPLICATES)
# assets that write no table (model files, a validation shown as metadata): keys of their own
REFERENCE_LM = dg.AssetKey(["curated", "reference_lm"])
DOMAIN_MODEL = dg.AssetKey(["curated", "domain_model"])
DOMAIN_VALIDATION = dg.AssetKey(["curated", "domain_validation"])

ReferenceLMConfig = config_from(models.ReferenceLMParams, "ReferenceLMConfig")
LangidValidationConfig = config_from(models.LangidValidationParams, "LangidValidationConfig")
CurateConfig = config_from(CurateParams, "CurateConfig")
DomainModelConfig = config_from(domain.DomainModelParams, "DomainModelConfig")
DomainValidationConfig = config_from(domain.DomainValidationParams, "DomainValidationConfig")
ExactDedupConfig = config_from(curate.ExactDedupParams, "ExactDedupConfig")


# ---- the reference language model ------------------------------------------------------------------------


@dg.asset(key=REFERENCE_LM, group_name="curated", code_version="reference-lm-1", kinds={"kenlm"})
def reference_lm(context: dg.AssetExecutionContext, config: ReferenceLMConfig) -> dg.MaterializeResult:
    """A modified Kneser-Ney n-gram model (ARPA, loaded by kenlm) estimated from the Wikipedia excerpt in
    data/corpus/; scores every curated document's perplexity."""
    params = params_from(models.ReferenceLMParams, config)
    out = reference_lm_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    stats = build_reference_lm(params.corpus_path, out, order=params.order)
    seconds = time.perf_counter() - t0
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    context.log.info("built %s (%s n-grams per order) in %.1fs", out, stats.ngram_counts, seconds)
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(out)),
            "arpa_sha256": digest,
            "order": params.order,
            "ngram_counts": md_table(["order", "n-grams"], [(i + 1, n) for i, n in enumerate(stats.ngram_counts)]),
            "sentences": stats.n_sentences,
            "words": stats.n_words,
            "seconds": round(seconds, 2),
        },
        data_version=dg.DataVersion(digest),
    )


# ---- language-ID validation -------------------------------------------------------------------------------


@dg.asset(**shell.table_asset(CURATED_LANGID_VALIDATION), code_version="langid-validation-1")
def langid_validation_asset(
    context: dg.AssetExecutionContext, config: LangidValidationConfig, catalog: IcebergCatalogResource
) -> dg.MaterializeResult:
    """Per-language precision/recall of the fastText lid.176 identifier on the labelled set in data/langid/
    (Iceberg table curated.langid_validation)."""
    params = params_from(models.LangidValidationParams, config)
    rows, sentences = models.validate_langid(params)
    commit = models.commit_validation(
        catalog.lakehouse(), rows, provenance(context, LANGID_VALIDATION, params.hashed())
    )
    return dg.MaterializeResult(metadata=validation_metadata(rows, sentences, params, commit))


def validation_metadata(rows: list[dict], sentences: int, params: models.LangidValidationParams, commit) -> dict:
    """Macro averages, the weak languages and the per-language table."""
    macro = next(r for r in rows if r["language"] == "macro")
    weak = sorted(models.weak_languages(rows, params.min_precision))
    return {
        "macro_f1": round(macro["f1"], 4),
        "macro_precision": round(macro["precision"], 4),
        "macro_recall": round(macro["recall"], 4),
        "languages": len(rows) - 1,
        "sentences": sentences,
        "languages_under_min_precision": ", ".join(weak) or "none",
        **shell.commit_metadata(commit),
        "per_language": md_table(
            ["language", "n", "precision", "recall", "f1", "unknown share"],
            [
                (
                    r["language"],
                    r["n"],
                    f"{r['precision']:.3f}",
                    f"{r['recall']:.3f}",
                    f"{r['f1']:.3f}",
                    f"{r['unknown_share']:.3f}",
                )
                for r in rows
            ],
        ),
    }


@dg.asset_check(asset=LANGID_VALIDATION)
def langid_precision_check(catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    """Warns when any language's precision is under 0.95 (the default `min_precision`)."""
    rows = catalog.lakehouse().scan(CURATED_LANGID_VALIDATION).to_pylist()
    min_precision = models.LangidValidationParams().min_precision
    weak = {lang: round(p, 3) for lang, p in models.weak_languages(rows, min_precision).items()}
    return dg.AssetCheckResult(
        passed=not weak,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            f"languages_under_{min_precision}": dg.MetadataValue.json(weak),
            "languages": sum(r["language"] != "macro" for r in rows),
        },
    )


# ---- the domain/topic classifier and its validation ----------------------------------------------------------


@dg.asset(key=DOMAIN_MODEL, group_name="curated", code_version="domain-model-2", kinds={"numpy"})
def domain_model(context: dg.AssetExecutionContext, config: DomainModelConfig) -> dg.MaterializeResult:
    """Logistic regression over wordllama embeddings (of the text; of a real URL's words too with use_url) that
    labels every curated document
    code / commerce / encyclopedic / forum/qa / news / other, or unknown under its confidence threshold; trained
    on data/domain/train.jsonl.gz (data/domain/README.md). Its sha256 is in curated.documents' provenance."""
    params = params_from(domain.DomainModelParams, config)
    t0 = time.perf_counter()
    model = domain.train(params)
    out = domain.domain_model_path()
    digest = domain.write_model(model, out)
    seconds = time.perf_counter() - t0
    info = model.info
    context.log.info(
        "trained %s on %d documents in %.1fs, threshold %.2f", out, info["train_documents"], seconds, model.threshold
    )
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(out)),
            "model_sha256": digest,
            "embedding_model": domain.EMBEDDING_MODEL,
            "confidence_threshold": model.threshold,
            "train_documents": info["train_documents"],
            "train_per_class": md_table(["class", "documents"], list(info["train_per_class"].items())),
            "oof_accuracy": info["oof_accuracy"],
            "oof_confident_accuracy": info["oof_confident_accuracy"],
            "oof_unknown_share": info["oof_unknown_share"],
            "seconds": round(seconds, 2),
        },
        data_version=dg.DataVersion(digest),
    )


@dg.asset(
    key=DOMAIN_VALIDATION,
    deps=[DOMAIN_MODEL],
    group_name="curated",
    code_version="domain-validation-2",
    kinds={"numpy"},
    check_specs=[
        dg.AssetCheckSpec(
            "domain_precision",
            asset=DOMAIN_VALIDATION,
            blocking=True,
            description="Fails (blocking) when a class's precision on the held-out real pages is under "
            "min_precision (default 0.7): mixtures must not filter on that class.",
        )
    ],
)
def domain_validation(context: dg.AssetExecutionContext, config: DomainValidationConfig) -> dg.MaterializeResult:
    """Per-class precision/recall, support and the unknown slice of the domain classifier on the held-out real
    pages of data/domain/eval.jsonl (labelled by reading them: data/domain/LABELLING.md), with and without their
    URLs, on every page and on pages whose host has no training page. Its own job (validate_domain): a class
    under the floor fails the blocking check, and mixtures must not filter on that class."""
    params = params_from(domain.DomainValidationParams, config)
    model = domain.load_model()
    held_out = domain.read_jsonl(params.eval_path)
    rows, preds = domain.validate(model, held_out)
    weak = {c: round(p, 3) for c, p in domain.weak_classes(rows, params.min_precision).items()}
    context.log.info("domain classifier on %d held-out documents: %s", len(held_out), rows[-1])
    return dg.MaterializeResult(
        metadata=domain_validation_metadata(model, held_out, rows, preds, params, weak),
        check_results=[
            dg.AssetCheckResult(
                check_name="domain_precision",
                passed=not weak,
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={
                    f"classes_under_{params.min_precision}": dg.MetadataValue.json(weak),
                    "classes_mixtures_must_not_filter_on": ", ".join(sorted(weak)) or "none",
                },
            )
        ],
    )


def _pr_table(rows: list[dict]) -> dg.MetadataValue:
    return md_table(
        ["class", "support", "predicted", "correct", "precision", "recall", "f1", "unknown"],
        [
            (
                r["label"],
                r["support"],
                r["predicted"],
                r["correct"],
                f"{r['precision']:.3f}",
                f"{r['recall']:.3f}",
                f"{r['f1']:.3f}",
                r["unknown"],
            )
            for r in rows
        ],
    )


def domain_validation_metadata(model, held_out, rows, preds, params, weak) -> dict:
    """The per-class table (all held-out pages, and those whose host has no training page; each with the page's
    URL and without it), the unknown slice and the confusion matrix."""
    gold = [r["label"] for r in held_out]
    labels = [*domain.CLASSES, domain.UNKNOWN]
    confusion = [
        (g, *(sum(1 for x, (p, _) in zip(gold, preds) if x == g and p == c) for c in labels)) for g in domain.CLASSES
    ]
    total = rows[-1]
    unseen = [r for r in held_out if not r["host_in_training"]]
    return {
        "dagster/row_count": len(held_out),
        "model_sha256": model.digest,
        "confidence_threshold": model.threshold,
        "accuracy_confident": round(total["precision"], 4),
        "accuracy_all": round(total["recall"], 4),
        "unknown_documents": total["unknown"],
        "unknown_share": round(total["unknown"] / max(len(held_out), 1), 4),
        "classes_under_min_precision": ", ".join(sorted(weak)) or "none",
        "per_class": _pr_table(rows),
        "per_class_without_url": _pr_table(domain.validate(model, held_out, with_url=False)[0]),
        "per_class_hosts_not_in_training": _pr_table(domain.validate(model, unseen)[0]),
        "per_class_hosts_not_in_training_without_url": _pr_table(domain.validate(model, unseen, with_url=False)[0]),
        "confusion (gold rows, predicted columns)": md_table(["gold", *labels], confusion),
        "eval_sha256": hashlib.sha256(Path(params.eval_path).read_bytes()).hexdigest(),
    }


# ---- curated documents -------------------------------------------------------------------------------------


@dg.asset(
    **shell.table_asset(CURATED_DOCUMENTS, ["doc_id", "record_id", "deletion_key"]),
    deps=[table_key(RAW_WARC_RECORDS), REFERENCE_LM, DOMAIN_MODEL],
    partitions_def=crawl_segments,
    code_version="curated-2",
    automation_condition=dg.AutomationCondition.eager(),
)
def curated_documents(
    context: dg.AssetExecutionContext,
    config: CurateConfig,
    catalog: IcebergCatalogResource,
    lm: LanguageModelResource,
    executor: TaskExecutorResource,
) -> dg.MaterializeResult:
    """One row per HTML response: extracted, normalised, PII-redacted text with language, quality, PII and
    perplexity signals as columns and the decision with its reason (curated.documents). Tasks curate slices of
    the raw partition (pinned at one snapshot) into staged files; a second map sets each row's perplexity bucket
    from the partition's per-language cut-offs; one commit replaces the partition."""
    ref, params, lakehouse = (
        parse_partition_key(context.partition_key),
        params_from(CurateParams, config),
        catalog.lakehouse(),
    )
    lm_path, run, tasks_executor = lm.path(), context.run.run_id, executor.executor()
    params, policy = governed_params(lakehouse, params)  # the approved thresholds, unless the config is ad hoc
    upstream = lakehouse.snapshot_ids([RAW_WARC_RECORDS])
    t0 = time.perf_counter()
    tasks = curate.plan(lakehouse, upstream[RAW_WARC_RECORDS.identifier], ref.crawl, ref.segment, params, lm_path, run)
    staged = run_tasks(context, tasks_executor, curate.run_task, tasks)
    bucket_tasks = curate.bucket_plan(lakehouse, ref.crawl, ref.segment, staged, curate.cutoffs(staged, params), run)
    results = run_tasks(context, tasks_executor, curate.run_bucket_task, bucket_tasks)
    hashed = {**params.hashed(), "lm_path": Path(lm_path).name, "domain_model": domain.load_model().digest}
    prov = provenance(context, DOCUMENTS, hashed, upstream, policy)
    commit = curate.commit(lakehouse, ref.crawl, ref.segment, staged, results, prov)
    stats = curate.PartitionStats.of(staged)
    context.log.info("%s: %d documents under %s, funnel %s", ref.partition_key, stats.rows, policy, stats.funnel())
    return dg.MaterializeResult(
        metadata={
            **documents_metadata(ref.partition_key, stats, commit, upstream, len(tasks), time.perf_counter() - t0),
            **policy,
            "extractor": params.extractor,
        }
    )


def documents_metadata(
    partition_key: str, stats: curate.PartitionStats, commit, upstream: dict, tasks: int, seconds: float
) -> dict:
    """Counts, the funnel, the languages and the perplexity histogram of one partition."""
    languages = sorted(stats.languages.items(), key=lambda kv: (-kv[1], kv[0]))[:15]
    metadata = {
        "dagster/row_count": stats.rows,
        "kept": stats.kept,
        "responses_read": stats.responses,
        "html_documents": stats.html,
        **shell.commit_metadata(commit, upstream),
        "tasks": tasks,
        "data_files": commit.files,
        "seconds": round(seconds, 2),
        "documents_per_second": round(stats.rows / max(seconds, 1e-9), 2),
        "funnel": md_table(["decision", "documents"], stats.funnel()),
        "languages": md_table(["language", "documents"], languages),
        "quality_rules": md_table(["rules (language_rules.py)", "documents", "kept"], _rules_rows(stats)),
    }
    if stats.perplexities:
        metadata["perplexity_histogram"] = dg.MetadataValue.md(
            histogram_markdown(stats.perplexities, f"perplexity of documents with text, {partition_key}")
        )
    return metadata


def _rules_rows(stats: curate.PartitionStats) -> list[tuple[str, int, int]]:
    """Documents judged by each language's rules, and how many of them were kept."""
    by = stats.quality_rules
    rows = [(n, by[(n, True)] + by[(n, False)], by[(n, True)]) for n in sorted({name for name, _ in by})]
    return sorted(rows, key=lambda r: (-r[1], r[0]))


# ---- exact duplicates across all partitions ----------------------------------------------------------------


@dg.asset(
    **shell.table_asset(CURATED_EXACT_DUPLICATES, ["doc_id"]),
    deps=[DOCUMENTS],
    code_version="exact-dedup-1",
    automation_condition=dg.AutomationCondition.eager(),
)
def exact_duplicates(
    context: dg.AssetExecutionContext,
    config: ExactDedupConfig,
    catalog: IcebergCatalogResource,
    executor: TaskExecutorResource,
) -> dg.MaterializeResult:
    """Exact duplicates of kept documents across ALL materialised partitions (hash of the stored text; the first
    by crawl then doc_id stays), partitioned by the duplicate's crawl. Only the crawls from the first whose
    curated.documents files changed since the last run are recomputed: tasks on contiguous hash ranges (pinned
    snapshot) read every crawl's rows of their range and write those crawls' rows; one commit replaces exactly
    those partitions. The shard count changes no row."""
    params, lakehouse = params_from(curate.ExactDedupParams, config), catalog.lakehouse()
    upstream = lakehouse.snapshot_ids([CURATED_DOCUMENTS])
    pinned = upstream[CURATED_DOCUMENTS.identifier]
    fingerprints = curate.crawl_fingerprints(lakehouse, pinned)
    stamps = {**thresholds_stamp(lakehouse), **curate.fingerprint_stamp(fingerprints)}
    prov = provenance(context, EXACT_DUPLICATES, params.hashed(), upstream, stamps)
    crawls = curate.exact_scope(lakehouse, fingerprints, prov)
    tasks = curate.exact_plan(lakehouse, pinned, params, crawls, context.run.run_id)
    results = run_tasks(context, executor.executor(), curate.run_exact_task, tasks)
    commit = curate.commit_exact_duplicates(lakehouse, results, crawls, prov)
    found = curate.ExactDuplicates.of(results)
    context.log.info(
        "%d exact duplicates among %d kept documents; crawls recomputed: %s", found.duplicates, found.kept, crawls
    )
    return dg.MaterializeResult(metadata=exact_metadata(found, commit, upstream, len(tasks), crawls))


def exact_metadata(found, commit, upstream: dict, tasks: int, crawls: list[str]) -> dict:
    """Counts of the exact dedup, what it read, and the funnel over every partition."""
    return {
        "dagster/row_count": found.duplicates,
        "kept_before_dedup": found.kept,
        "kept_after_dedup": found.kept - found.duplicates,
        **shell.commit_metadata(commit, upstream),
        "tasks": tasks,
        "recomputed_crawls": ", ".join(crawls) or "none",
        "bytes_scanned": found.bytes_scanned,
        "funnel_all_partitions": md_table(["decision", "documents"], found.funnel()),
    }


# ---- jobs --------------------------------------------------------------------------------------------------

curate_models_job = shell.asset_job(
    "curate_models",
    REFERENCE_LM,
    LANGID_VALIDATION,
    DOMAIN_MODEL,
    description="Build the reference KenLM model and the domain classifier, validate language ID (needed once before "
    "curation).",
)

# its own job: its blocking check fails while a class is under the precision floor on real pages, and a failed
# blocking check fails the run (curation must not wait on it; mixtures must not filter on the failed classes)
validate_domain_job = shell.asset_job(
    "validate_domain",
    DOMAIN_VALIDATION,
    description="Validate the domain classifier on held-out real pages; fails while a class is under its precision "
    "floor (mixtures must not filter on it).",
)

curate_job = shell.asset_job(
    "curate",
    DOCUMENTS,
    description="Curate one crawl segment: extraction, language, quality, PII, perplexity decisions.",
)

exact_dedup_job = shell.asset_job(
    "exact_dedup",
    EXACT_DUPLICATES,
    description="Exact duplicates across every materialised partition of curated.documents.",
)


defs = dg.Definitions(
    assets=[
        reference_lm,
        langid_validation_asset,
        domain_model,
        domain_validation,
        curated_documents,
        exact_duplicates,
    ],
    asset_checks=[langid_precision_check],
    jobs=[curate_models_job, validate_domain_job, curate_job, exact_dedup_job],
)
