"""Curated assets: the reference LM, language-ID validation, curated documents, exact duplicates.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import dataclasses
import hashlib
import tempfile
import time
import typing
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pydantic
from pyiceberg.expressions import And, EqualTo

from assets.governance.propagate import erasure
from assets.curated.langid import DEFAULT_LANG_THRESHOLD, LanguageIdentifier, bundled_model_path, langid_validation
from assets.curated.ngram_lm import build_reference_lm
from assets.curated.pipeline import RAW_COLUMNS, CurateParams, curate_records, exact_duplicate_rows, funnel, is_html
from assets.curated.perplexity import buckets_by_language
from assets.plots import histogram_markdown
from assets.curated.quality import QualityThresholds
from assets.lakehouse import md_table, provenance
from assets.partitions import crawl_segments
from assets.raw.defs import WARC_RECORDS
from iceberg_catalog.schemas import CURATED_DOCUMENTS
from resources import IcebergCatalogResource, LanguageModelResource, parse_partition_key, reference_lm_path

REPO_ROOT = Path(__file__).resolve().parents[2]
REFERENCE_CORPUS = REPO_ROOT / "data" / "corpus" / "enwiki_excerpt_clean_104articles.txt.xz"
LANGID_LABELLED = REPO_ROOT / "data" / "langid" / "sentences.tsv"

REFERENCE_LM = dg.AssetKey(["curated", "reference_lm"])
LANGID_VALIDATION = dg.AssetKey(["curated", "langid_validation"])
DOCUMENTS = dg.AssetKey(["curated", "documents"])
EXACT_DUPLICATES = dg.AssetKey(["curated", "exact_duplicates"])


# ---- the reference language model ------------------------------------------------------------------------

class ReferenceLMConfig(dg.Config):
    """Modified Kneser-Ney n-gram model estimated from a reference corpus kept in the repo."""

    order: int = 3
    corpus_path: str = str(REFERENCE_CORPUS)


@dg.asset(key=REFERENCE_LM, group_name="curated", code_version="reference-lm-1", kinds={"kenlm"},
          description="A modified Kneser-Ney n-gram model (ARPA, loaded by kenlm) estimated from the Wikipedia "
                      "excerpt in data/corpus/; scores every curated document's perplexity.")
def reference_lm(context: dg.AssetExecutionContext, config: ReferenceLMConfig) -> dg.MaterializeResult:
    out = reference_lm_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    stats = build_reference_lm(config.corpus_path, out, order=config.order)
    seconds = time.perf_counter() - t0
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    context.log.info("built %s (%s n-grams per order) in %.1fs", out, stats.ngram_counts, seconds)
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(out)),
            "arpa_sha256": digest,
            "order": config.order,
            "ngram_counts": md_table(["order", "n-grams"], [(i + 1, n) for i, n in enumerate(stats.ngram_counts)]),
            "sentences": stats.n_sentences,
            "words": stats.n_words,
            "seconds": round(seconds, 2),
        },
        data_version=dg.DataVersion(digest),
    )


# ---- language-ID validation -------------------------------------------------------------------------------

class LangidValidationConfig(dg.Config):
    threshold: float = DEFAULT_LANG_THRESHOLD
    labelled_path: str = str(LANGID_LABELLED)
    min_precision: float = 0.95


def read_labelled(path: str) -> list[tuple[str, str]]:
    """(text, gold language) pairs from the repo's TSV (`lang<TAB>sentence`, with a header)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            lang, _, text = line.rstrip("\n").partition("\t")
            if text:
                rows.append((text, lang))
    return rows


@dg.asset(key=LANGID_VALIDATION, group_name="curated", code_version="langid-validation-1", kinds={"iceberg"},
          description="Per-language precision/recall of the fastText lid.176 identifier on the labelled set in "
                      "data/langid/ (Iceberg table curated.langid_validation).",
          pool="iceberg_curated")
def langid_validation_asset(context: dg.AssetExecutionContext, config: LangidValidationConfig,
                            catalog: IcebergCatalogResource) -> dg.MaterializeResult:
    labelled = read_labelled(config.labelled_path)
    rows = langid_validation(LanguageIdentifier(), labelled, threshold=config.threshold)
    model = Path(bundled_model_path()).name
    table_rows = [{"language": r["lang"], "n": r["n"], "precision": r["precision"], "recall": r["recall"],
                   "f1": r["f1"], "unknown_share": r["unknown_share"], "threshold": config.threshold, "model": model}
                  for r in rows]
    writer = catalog.partition_writer("curated.langid_validation", {})
    writer.write(pa.Table.from_pylist(table_rows))
    commit = writer.commit(provenance(context, LANGID_VALIDATION, config.model_dump()))
    macro = next(r for r in rows if r["lang"] == "macro")
    weak = sorted(r["lang"] for r in rows if r["lang"] != "macro" and r["precision"] < config.min_precision)
    return dg.MaterializeResult(
        metadata={
            "macro_f1": round(macro["f1"], 4),
            "macro_precision": round(macro["precision"], 4),
            "macro_recall": round(macro["recall"], 4),
            "languages": len(rows) - 1,
            "sentences": len(labelled),
            "languages_under_min_precision": ", ".join(weak) or "none",
            "iceberg_snapshot_id": str(commit.snapshot_id),
            "per_language": md_table(["language", "n", "precision", "recall", "f1", "unknown share"],
                                     [(r["lang"], r["n"], f"{r['precision']:.3f}", f"{r['recall']:.3f}",
                                       f"{r['f1']:.3f}", f"{r['unknown_share']:.3f}") for r in rows]),
        }
    )


@dg.asset_check(asset=LANGID_VALIDATION, description="Warns when any language's precision is under 0.95.")
def langid_precision_check(catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    t = catalog.table("curated.langid_validation").scan().to_arrow()
    per_lang = [r for r in t.to_pylist() if r["language"] != "macro"]
    weak = {r["language"]: round(r["precision"], 3) for r in per_lang if r["precision"] < 0.95}
    return dg.AssetCheckResult(
        passed=not weak,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"languages_under_0.95": dg.MetadataValue.json(weak), "languages": len(per_lang)},
    )


# ---- curated documents -------------------------------------------------------------------------------------

_QUALITY_HINTS = typing.get_type_hints(QualityThresholds)
QualityConfig = pydantic.create_model(
    "QualityConfig",
    __base__=dg.Config,
    __doc__="Quality thresholds (published defaults: Gopher, C4, FineWeb); null disables a rule.",
    **{f.name: (_QUALITY_HINTS[f.name], f.default) for f in dataclasses.fields(QualityThresholds)},
)


class CurateConfig(dg.Config):
    """The funnel's knobs; defaults are the published values (see assets/curated/pipeline.py)."""

    language_threshold: float = DEFAULT_LANG_THRESHOLD
    allowed_languages: typing.Optional[list[str]] = None
    # CPU seconds per page: a safety net for pathological pages, set well above what ordinary pages need
    # (the sample crawl's slowest takes ~1.8 s), so no decision depends on timing jitter
    extract_timeout_s: float = 5.0
    max_html_bytes: int = 5_000_000
    ppl_head_pct: float = 30.0
    ppl_tail_pct: float = 60.0
    quality: QualityConfig = QualityConfig()
    workers: int = pydantic.Field(default=1, description="processes curating in parallel (results are identical)")
    chunk_docs: int = 32

    def params(self) -> CurateParams:
        return CurateParams(
            language_threshold=self.language_threshold,
            allowed_languages=tuple(self.allowed_languages) if self.allowed_languages else None,
            quality=QualityThresholds(**self.quality.model_dump()),
            extract_timeout_s=self.extract_timeout_s,
            max_html_bytes=self.max_html_bytes,
            ppl_head_pct=self.ppl_head_pct,
            ppl_tail_pct=self.ppl_tail_pct,
        )


def _html_chunks(reader: pa.RecordBatchReader, chunk_docs: int, counts: dict):
    """Chunks of HTML records (as dicts) from a raw scan, counting what was skipped."""
    chunk: list[dict] = []
    for batch in reader:
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


@dg.asset(
    key=DOCUMENTS,
    metadata=erasure(("curated.documents", ["doc_id", "record_id", "deletion_key"])),
    deps=[WARC_RECORDS, REFERENCE_LM],
    partitions_def=crawl_segments,
    group_name="curated",
    code_version="curated-1",
    kinds={"iceberg"},
    pool="iceberg_curated",
    automation_condition=dg.AutomationCondition.eager(),
    description="One row per HTML response: extracted, normalised, PII-redacted text with language, quality, PII "
                "and perplexity signals as columns and the decision with its reason (curated.documents).",
)
def curated_documents(context: dg.AssetExecutionContext, config: CurateConfig, catalog: IcebergCatalogResource,
                      lm: LanguageModelResource) -> dg.MaterializeResult:
    ref = parse_partition_key(context.partition_key)
    params = config.params()
    lm_path = lm.path()
    raw = catalog.table("raw.warc_records")
    raw_snapshot = raw.current_snapshot()
    upstream = {"raw.warc_records": raw_snapshot.snapshot_id if raw_snapshot else None}
    reader = raw.scan(
        row_filter=And(EqualTo("crawl", ref.crawl), EqualTo("segment", ref.segment)),
        selected_fields=RAW_COLUMNS,
        snapshot_id=upstream["raw.warc_records"],
    ).to_arrow_batch_reader()

    schema = CURATED_DOCUMENTS.arrow_schema
    counts = {"responses": 0, "html": 0}
    langs: list = []
    ppls: list = []
    decisions: list = []
    t0 = time.perf_counter()
    # Pass 1 spills rows to a local Parquet file; perplexity buckets need every document's perplexity first.
    with tempfile.TemporaryDirectory(prefix="tokenlake-curate-") as tmp:
        spill = Path(tmp) / "rows.parquet"
        with pq.ParquetWriter(spill, schema) as spill_writer:
            for rows in curate_records(_html_chunks(reader, config.chunk_docs, counts), params, lm_path,
                                       workers=config.workers):
                spill_writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                for r in rows:
                    langs.append(r["language"])
                    ppls.append(r["perplexity"])
                    decisions.append(r["decision"])
                if len(decisions) % 256 < len(rows):
                    context.log.info("%s: %d documents curated (%.1f docs/s)", ref.partition_key, len(decisions),
                                     len(decisions) / (time.perf_counter() - t0))
        buckets = buckets_by_language(langs, ppls, params.ppl_head_pct, params.ppl_tail_pct)
        writer = catalog.partition_writer("curated.documents", {"crawl": ref.crawl, "segment": ref.segment})
        offset = 0
        for batch in pq.ParquetFile(spill).iter_batches(batch_size=1024):
            table = pa.Table.from_batches([batch], schema=schema)
            col = pa.array(buckets[offset : offset + table.num_rows], schema.field("ppl_bucket").type)
            table = table.set_column(table.schema.get_field_index("ppl_bucket"), schema.field("ppl_bucket"), col)
            writer.write(table)
            offset += table.num_rows
        commit = writer.commit(provenance(context, DOCUMENTS, {**params.as_config(), "lm_path": Path(lm_path).name},
                                          upstream))
    seconds = time.perf_counter() - t0
    kept_ppl = [p for p, d in zip(ppls, decisions) if p is not None]
    metadata = {
        "dagster/row_count": len(decisions),
        "kept": sum(d is None for d in decisions),
        "responses_read": counts["responses"],
        "html_documents": counts["html"],
        "iceberg_snapshot_id": str(commit.snapshot_id),
        "upstream_snapshot_ids": dg.MetadataValue.json(upstream),
        "seconds": round(seconds, 2),
        "documents_per_second": round(len(decisions) / max(seconds, 1e-9), 2),
        "funnel": md_table(["decision", "documents"], funnel(decisions)),
        "languages": md_table(["language", "documents"], sorted(
            ((lang, langs.count(lang)) for lang in set(langs) if lang), key=lambda kv: (-kv[1], kv[0]))[:15]),
    }
    if kept_ppl:
        metadata["perplexity_histogram"] = dg.MetadataValue.md(
            histogram_markdown(kept_ppl, f"perplexity of documents with text, {ref.partition_key}"))
    context.log.info("%s: %d documents, funnel %s", ref.partition_key, len(decisions), funnel(decisions))
    return dg.MaterializeResult(metadata=metadata)


# ---- exact duplicates across all partitions ----------------------------------------------------------------

@dg.asset(
    key=EXACT_DUPLICATES,
    metadata=erasure(("curated.exact_duplicates", ["doc_id"])),
    deps=[DOCUMENTS],
    group_name="curated",
    code_version="exact-dedup-1",
    kinds={"iceberg"},
    pool="iceberg_curated",
    automation_condition=dg.AutomationCondition.eager(),
    description="Exact duplicates of kept documents across ALL materialised partitions (hash of the stored "
                "text; the first by crawl then doc_id stays). Table curated.exact_duplicates.",
)
def exact_duplicates(context: dg.AssetExecutionContext, catalog: IcebergCatalogResource) -> dg.MaterializeResult:
    docs_table = catalog.table("curated.documents")
    snap = docs_table.current_snapshot()
    upstream = {"curated.documents": snap.snapshot_id if snap else None}
    docs = docs_table.scan(selected_fields=("doc_id", "crawl", "segment", "text_sha256", "kept", "decision"),
                           snapshot_id=upstream["curated.documents"]).to_arrow() if snap else None
    if docs is None:
        kept = pa.table({"doc_id": pa.array([], pa.string()), "crawl": pa.array([], pa.string()),
                         "segment": pa.array([], pa.string()), "text_sha256": pa.array([], pa.string())})
        decisions: list = []
    else:
        kept = docs.filter(pc.field("kept")).select(["doc_id", "crawl", "segment", "text_sha256"])
        decisions = docs["decision"].to_pylist()
    dups = exact_duplicate_rows(kept)
    writer = catalog.partition_writer("curated.exact_duplicates", {})
    writer.write(dups)
    commit = writer.commit(provenance(context, EXACT_DUPLICATES, {"key": "text_sha256", "order": "crawl,doc_id"},
                                      upstream))
    n_dup = dups.num_rows
    full = funnel(decisions)
    full = [(d, n) for d, n in full if d != "kept"] + [("exact_duplicate", n_dup), ("kept", kept.num_rows - n_dup)]
    context.log.info("%d exact duplicates among %d kept documents", n_dup, kept.num_rows)
    return dg.MaterializeResult(metadata={
        "dagster/row_count": n_dup,
        "kept_before_dedup": kept.num_rows,
        "kept_after_dedup": kept.num_rows - n_dup,
        "iceberg_snapshot_id": str(commit.snapshot_id),
        "upstream_snapshot_ids": dg.MetadataValue.json(upstream),
        "funnel_all_partitions": md_table(["decision", "documents"], full),
    })


assets = [reference_lm, langid_validation_asset, curated_documents, exact_duplicates]
asset_checks = [langid_precision_check]
