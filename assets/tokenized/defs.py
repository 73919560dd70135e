"""Tokenized: tokenizers as data, and kept documents as tokenizer-bound token arrays.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import time

import dagster as dg

from assets import shell
from assets.partitions import dimension_dep, tokenized_partitions, tokenizers
from assets.shell import config_from, params_from, provenance, run_tasks, table_key
from assets.tokenized import tokenize
from assets.tokenized.tokens import load_tokenizer, tokenizer_row
from iceberg_catalog import schemas as T
from resources import IcebergCatalogResource, TokenizerResource, parse_partition_key
from resources.executor import TaskExecutorResource

TOKENIZERS = table_key(T.TOKENIZED_TOKENIZERS)
TOKENIZED_DOCUMENTS = table_key(T.TOKENIZED_DOCUMENTS)
TokenizeConfig = config_from(tokenize.TokenizeParams, "TokenizeConfig")


@dg.asset(**shell.table_asset(T.TOKENIZED_TOKENIZERS), partitions_def=tokenizers, code_version="tokenizers-1")
def tokenizers_asset(
    context: dg.AssetExecutionContext, catalog: IcebergCatalogResource, tokenizer: TokenizerResource
) -> dg.MaterializeResult:
    """Each named tokenizer.json as data: id (sha256 of the canonical JSON), vocab size, EOS/BOS ids, token
    width and the JSON itself (tokenized.tokenizers)."""
    name = context.partition_key
    lt = load_tokenizer(tokenizer.path(name), name)
    info = lt.info
    writer = catalog.lakehouse().writer(T.TOKENIZED_TOKENIZERS, {"tokenizer_id": info.tokenizer_id})
    writer.write(tokenizer_row(lt))
    commit = writer.commit(provenance(context, TOKENIZERS, {"name": name, "tokenizer_id": info.tokenizer_id}))
    return dg.MaterializeResult(
        metadata={
            "tokenizer_id": info.tokenizer_id,
            "vocab_size": info.vocab_size,
            "eos_id": info.eos_id,
            "token_dtype": info.token_dtype,
            **shell.commit_metadata(commit),
        }
    )


@dg.asset(
    **shell.table_asset(T.TOKENIZED_DOCUMENTS, ["doc_id", "record_id", "deletion_key"]),
    partitions_def=tokenized_partitions,
    deps=[
        dimension_dep(table_key(T.CURATED_DOCUMENTS), "segment"),
        dimension_dep(TOKENIZERS, "tokenizer"),
        table_key(T.CURATED_EXACT_DUPLICATES),
        table_key(T.DEDUP_NEAR_DUPLICATES),
    ],
    code_version="tokenized-2",
)
def tokenized_documents(
    context: dg.AssetExecutionContext,
    config: TokenizeConfig,
    catalog: IcebergCatalogResource,
    tokenizer: TokenizerResource,
    executor: TaskExecutorResource,
) -> dg.MaterializeResult:
    """Kept documents (filters passed, not an exact or near duplicate) as token arrays with EOS, n_tokens, sha256
    checksum, lineage keys and mixture labels (tokenized.documents), in the curated partition's order."""
    keys = context.partition_key.keys_by_dimension
    name, ref = keys["tokenizer"], parse_partition_key(keys["segment"])
    params, lakehouse = params_from(tokenize.TokenizeParams, config), catalog.lakehouse()
    lt = load_tokenizer(tokenizer.path(name), name)
    tid = lt.info.tokenizer_id
    pins = lakehouse.snapshot_ids(tokenize.UPSTREAM)
    t0 = time.perf_counter()
    tok_ref = tokenize.TokenizerRef(name, tokenizer.path(name), tid)
    tasks = tokenize.plan(lakehouse, tok_ref, ref.crawl, ref.segment, pins, params, context.run.run_id)
    results = run_tasks(context, executor.executor(), tokenize.run_task, tasks)
    prov = provenance(context, TOKENIZED_DOCUMENTS, {"tokenizer_id": tid, **params.hashed()}, pins)
    commit = tokenize.commit(lakehouse, tid, ref.crawl, ref.segment, results, prov)
    seconds = time.perf_counter() - t0
    total = tokenize.totals(results)
    rate = total["tokens"] / max(seconds, 1e-9)
    context.log.info(
        "%s x %s: %d documents, %d tokens (%.0f tokens/s)",
        name,
        ref.partition_key,
        total["documents"],
        total["tokens"],
        rate,
    )
    return dg.MaterializeResult(metadata=documents_metadata(tid, total, len(tasks), seconds, commit, pins))


def documents_metadata(tokenizer_id: str, total: dict, tasks: int, seconds: float, commit, pins: dict) -> dict:
    """Counts and rate of one (tokenizer, segment) partition (seconds: plan, tasks and commit)."""
    return {
        "dagster/row_count": total["documents"],
        "tokenizer_id": tokenizer_id,
        "n_tokens": total["tokens"],
        "excluded_duplicates": total["excluded"],
        "tasks": tasks,
        "tokens_per_second": round(total["tokens"] / max(seconds, 1e-9), 1),
        "seconds": round(seconds, 2),
        **shell.commit_metadata(commit, pins),
    }


TokenCheckConfig = config_from(tokenize.TokenCheckParams, "TokenCheckConfig")


@dg.asset_check(asset=TOKENIZED_DOCUMENTS, blocking=True)
def tokenized_documents_check(
    context: dg.AssetCheckExecutionContext, config: TokenCheckConfig, catalog: IcebergCatalogResource
) -> dg.AssetCheckResult:
    """The rows of the partition just written (every partition when run on its own): every checksum and count
    verified, a sample decoded with the tokenizer recovered from tokenized.tokenizers and compared with the
    curated text; bad rows named by doc_id."""
    tags = context.run.tags
    name, segment = tags.get("dagster/partition/tokenizer"), tags.get("dagster/partition/segment")
    ref = parse_partition_key(segment) if segment else None
    report = tokenize.check_documents(
        catalog.lakehouse(),
        name,
        ref.crawl if ref else None,
        ref.segment if ref else None,
        params_from(tokenize.TokenCheckParams, config).decode_sample,
    )
    return dg.AssetCheckResult(
        passed=not report.problems,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "scope": f"{name or 'all tokenizers'} x {segment or 'all segments'}",
            "rows_checked": report.rows_checked,
            "rows_decoded": report.rows_decoded,
            "problems": len(report.problems),
            "bad_doc_ids": dg.MetadataValue.json(report.problems[:50]),
        },
    )


register_tokenizer_job = shell.asset_job(
    "register_tokenizer",
    TOKENIZERS,
    description="Store a named tokenizer.json (a `tokenizers` partition) in tokenized.tokenizers.",
)

tokenize_job = shell.asset_job(
    "tokenize",
    TOKENIZED_DOCUMENTS,
    description="Tokenize one (tokenizer, crawl segment) partition of kept documents, then check checksums.",
)

defs = dg.Definitions(
    assets=[tokenizers_asset, tokenized_documents],
    asset_checks=[tokenized_documents_check],
    jobs=[register_tokenizer_job, tokenize_job],
)
