"""Tokenized assets: tokenizers as data, and kept documents as tokenizer-bound token arrays.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import time

import dagster as dg
import pyarrow as pa
from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, And, EqualTo, In, IsNull, Not

from assets.governance.propagate import erasure
from assets.curated.defs import DOCUMENTS, EXACT_DUPLICATES
from assets.dedup.defs import NEAR_DUPLICATES
from assets.lakehouse import provenance
from assets.partitions import dimension_dep, tokenized_partitions, tokenizers
from assets.tokenized.tokens import (
    check_rows,
    encode_documents,
    load_tokenizer,
    registered_domain_class,
    tokenizer_from_json,
    tokens_checksum,
)
from resources import IcebergCatalogResource, TokenizerResource, parse_partition_key

TOKENIZERS = dg.AssetKey(["tokenized", "tokenizers"])
TOKENIZED_DOCUMENTS = dg.AssetKey(["tokenized", "documents"])


@dg.asset(key=TOKENIZERS, partitions_def=tokenizers, group_name="tokenized", code_version="tokenizers-1",
          kinds={"iceberg"}, pool="iceberg_tokenized",
          description="Each named tokenizer.json as data: id (sha256 of the canonical JSON), vocab size, EOS/BOS "
                      "ids, token width and the JSON itself (tokenized.tokenizers).")
def tokenizers_asset(context: dg.AssetExecutionContext, catalog: IcebergCatalogResource,
                     tokenizer: TokenizerResource) -> dg.MaterializeResult:
    name = context.partition_key
    lt = load_tokenizer(tokenizer.path(name), name)
    info = lt.info
    writer = catalog.partition_writer("tokenized.tokenizers", {"tokenizer_id": info.tokenizer_id})
    writer.write(pa.table({"tokenizer_id": [info.tokenizer_id], "name": [name], "vocab_size": [info.vocab_size],
                           "eos_id": [info.eos_id], "bos_id": pa.array([info.bos_id], pa.int32()),
                           "token_dtype": [info.token_dtype], "tokenizer_json": [lt.json_text]}))
    commit = writer.commit(provenance(context, TOKENIZERS, {"name": name, "tokenizer_id": info.tokenizer_id}))
    return dg.MaterializeResult(metadata={
        "tokenizer_id": info.tokenizer_id, "vocab_size": info.vocab_size, "eos_id": info.eos_id,
        "token_dtype": info.token_dtype, "iceberg_snapshot_id": str(commit.snapshot_id)})


class TokenizeConfig(dg.Config):
    """`docs_per_row_group`: the loader reads and block-shuffles whole row groups; ~1k documents (~1-3 MB of
    tokens) keeps reads large enough for object stores and leaves enough row groups per partition to shuffle."""

    docs_per_row_group: int = 1024
    # documents per `encode_batch` call: larger calls parallelise better; memory holds one call's texts and tokens
    encode_batch_docs: int = 2048


def _excluded(catalog: IcebergCatalogResource, crawl: str, segment: str) -> set[str]:
    """Kept-by-filters documents that dedup dropped: exact duplicates and near duplicates of this segment."""
    where = And(EqualTo("crawl", crawl), EqualTo("segment", segment))
    exact = catalog.table("curated.exact_duplicates").scan(row_filter=where, selected_fields=("doc_id",)).to_arrow()
    near = catalog.table("curated.near_duplicates").scan(row_filter=And(where, Not(IsNull("decision"))),
                                                         selected_fields=("doc_id",)).to_arrow()
    return set(exact["doc_id"].to_pylist()) | set(near["doc_id"].to_pylist())


@dg.asset(
    key=TOKENIZED_DOCUMENTS,
    metadata=erasure(("tokenized.documents", ["doc_id", "record_id", "deletion_key"])),
    partitions_def=tokenized_partitions,
    deps=[
        dimension_dep(DOCUMENTS, "segment"),
        dimension_dep(TOKENIZERS, "tokenizer"),
        EXACT_DUPLICATES,
        NEAR_DUPLICATES,
    ],
    group_name="tokenized",
    code_version="tokenized-1",
    kinds={"iceberg"},
    pool="iceberg_tokenized",
    description="Kept documents (filters passed, not an exact or near duplicate) as token arrays with EOS, "
                "n_tokens, sha256 checksum, lineage keys and mixture labels (tokenized.documents).",
)
def tokenized_documents(context: dg.AssetExecutionContext, config: TokenizeConfig, catalog: IcebergCatalogResource,
                        tokenizer: TokenizerResource) -> dg.MaterializeResult:
    keys = context.partition_key.keys_by_dimension
    name, ref = keys["tokenizer"], parse_partition_key(keys["segment"])
    lt = load_tokenizer(tokenizer.path(name), name)
    tid = lt.info.tokenizer_id
    upstream = catalog.snapshot_ids(("curated.documents", "curated.exact_duplicates", "curated.near_duplicates"))
    excluded = _excluded(catalog, ref.crawl, ref.segment)
    reader = catalog.table("curated.documents").scan(
        row_filter=And(EqualTo("crawl", ref.crawl), And(EqualTo("segment", ref.segment), EqualTo("kept", True))),
        selected_fields=("doc_id", "record_id", "deletion_key", "crawl", "segment", "text", "language", "ppl_bucket",
                         "host"),
        snapshot_id=upstream["curated.documents"],
    ).to_arrow_batch_reader()
    writer = catalog.partition_writer("tokenized.documents", {"tokenizer_id": tid, "crawl": ref.crawl,
                                                              "segment": ref.segment},
                                      row_group_rows=config.docs_per_row_group)
    t0 = time.perf_counter()
    n_docs = n_tokens = n_excluded = 0
    pending: list[dict] = []

    def flush() -> None:
        nonlocal n_docs, n_tokens
        if not pending:
            return
        arrays = encode_documents(lt, [r["text"] for r in pending])
        data = [a.tobytes() for a in arrays]
        writer.write(pa.table({
            "tokenizer_id": [tid] * len(pending),
            "doc_id": [r["doc_id"] for r in pending],
            "record_id": [r["record_id"] for r in pending],
            "deletion_key": [r["deletion_key"] for r in pending],
            "crawl": [r["crawl"] for r in pending],
            "segment": [r["segment"] for r in pending],
            "tokens": data,
            "token_dtype": [lt.info.token_dtype] * len(pending),
            "n_tokens": pa.array([len(a) for a in arrays], pa.int32()),
            "tokens_sha256": [tokens_checksum(d) for d in data],
            "language": [r["language"] for r in pending],
            "ppl_bucket": [r["ppl_bucket"] for r in pending],
            "host": [r["host"] for r in pending],
            "domain_class": [registered_domain_class(r["host"]) for r in pending],
        }))
        n_docs += len(pending)
        n_tokens += int(sum(len(a) for a in arrays))
        pending.clear()

    for batch in reader:
        for row in batch.to_pylist():
            if row["doc_id"] in excluded:
                n_excluded += 1
                continue
            pending.append(row)
            if len(pending) >= max(config.encode_batch_docs, config.docs_per_row_group):
                flush()
    flush()
    commit = writer.commit(provenance(context, TOKENIZED_DOCUMENTS, {"tokenizer_id": tid, **config.model_dump()},
                                      upstream))
    seconds = time.perf_counter() - t0
    context.log.info("%s x %s: %d documents, %d tokens (%.0f tokens/s)", name, ref.partition_key, n_docs, n_tokens,
                     n_tokens / max(seconds, 1e-9))
    return dg.MaterializeResult(metadata={
        "dagster/row_count": n_docs,
        "tokenizer_id": tid,
        "n_tokens": n_tokens,
        "excluded_duplicates": n_excluded,
        "tokens_per_second": round(n_tokens / max(seconds, 1e-9), 1),
        "seconds": round(seconds, 2),
        "iceberg_snapshot_id": str(commit.snapshot_id),
        "upstream_snapshot_ids": dg.MetadataValue.json(upstream),
    })


class TokenCheckConfig(dg.Config):
    decode_sample: int = 64  # documents per (tokenizer, crawl, segment) decoded and compared with curated text


@dg.asset_check(asset=TOKENIZED_DOCUMENTS, blocking=True,
                description="The rows of the partition just written (every partition when run on its own): every "
                            "checksum and count verified, a sample decoded with the tokenizer recovered from "
                            "tokenized.tokenizers and compared with the curated text; bad rows named by doc_id.")
def tokenized_documents_check(context: dg.AssetCheckExecutionContext, config: TokenCheckConfig,
                              catalog: IcebergCatalogResource) -> dg.AssetCheckResult:
    tags = context.run.tags
    name, segment = tags.get("dagster/partition/tokenizer"), tags.get("dagster/partition/segment")
    tok_rows = catalog.table("tokenized.tokenizers").scan(
        row_filter=EqualTo("name", name) if name else AlwaysTrue()).to_arrow().to_pylist()
    loaded = {r["tokenizer_id"]: tokenizer_from_json(r["tokenizer_json"], r["name"], known_id=r["tokenizer_id"])
              for r in tok_rows}
    where = AlwaysTrue()
    if segment:
        ref = parse_partition_key(segment)
        where = And(EqualTo("crawl", ref.crawl), EqualTo("segment", ref.segment))
    if name:
        where = And(where, In("tokenizer_id", sorted(loaded))) if loaded else AlwaysFalse()
    problems: list[dict] = []
    n_rows = n_decoded = 0
    seen: dict[tuple, int] = {}
    reader = catalog.table("tokenized.documents").scan(
        row_filter=where, selected_fields=("tokenizer_id", "doc_id", "crawl", "segment", "tokens", "token_dtype",
                                           "n_tokens", "tokens_sha256")).to_arrow_batch_reader()
    for batch in reader:
        rows = batch.to_pylist()
        n_rows += len(rows)
        sample, rest = [], []
        for r in rows:
            key = (r["tokenizer_id"], r["crawl"], r["segment"])
            if seen.get(key, 0) < config.decode_sample:
                seen[key] = seen.get(key, 0) + 1
                sample.append(r)
            else:
                rest.append(r)
        problems += check_rows(rest)
        texts = _curated_texts(catalog, [r["doc_id"] for r in sample])
        for tid in sorted({r["tokenizer_id"] for r in sample}):
            part = [r for r in sample if r["tokenizer_id"] == tid]
            if tid not in loaded:
                problems += [{"doc_id": r["doc_id"], "problem": f"tokenizer {tid} not in tokenized.tokenizers"}
                             for r in part]
                continue
            problems += check_rows(part, loaded[tid], texts)
            n_decoded += len(part)
    return dg.AssetCheckResult(
        passed=not problems,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"scope": f"{name or 'all tokenizers'} x {segment or 'all segments'}", "rows_checked": n_rows,
                  "rows_decoded": n_decoded, "problems": len(problems),
                  "bad_doc_ids": dg.MetadataValue.json(problems[:50])},
    )


def _curated_texts(catalog: IcebergCatalogResource, doc_ids: list[str]) -> dict[str, str]:
    if not doc_ids:
        return {}
    t = catalog.table("curated.documents").scan(row_filter=In("doc_id", doc_ids),
                                                selected_fields=("doc_id", "text")).to_arrow()
    return dict(zip(t["doc_id"].to_pylist(), t["text"].to_pylist()))


assets = [tokenizers_asset, tokenized_documents]
asset_checks = [tokenized_documents_check]
