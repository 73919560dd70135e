"""tokenized/* on the whole sample crawl, through Dagster into a real catalog, with the real tokenizers."""

from __future__ import annotations

import dagster as dg
import pyarrow.compute as pc
import pytest
from tokenizers import Tokenizer

from assets.tokenized.defs import defs as tokenized_defs
from assets.tokenized.tokens import decode_document, load_tokenizer, tokens_from_bytes
from iceberg_catalog import CatalogConfig, Lakehouse
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    DEDUP_NEAR_DUPLICATES,
    TOKENIZED_DOCUMENTS,
    TOKENIZED_TOKENIZERS,
)
from resources import DEFAULT_TOKENIZERS, IcebergCatalogResource, TokenizerResource
from resources.executor import TaskExecutorResource
from tests.tokenized.partitions import write_partition

from conftest import SAMPLE_CRAWL, SAMPLE_KEYS, materialize_assets, materialize_segments

ASSETS = list(tokenized_defs.assets) + list(tokenized_defs.asset_checks)


def resources(catalog: IcebergCatalogResource | None = None) -> dict:
    return {
        "catalog": catalog or IcebergCatalogResource(),
        "tokenizer": TokenizerResource(),
        "executor": TaskExecutorResource(),
    }


def tokenize(instance, name: str, keys=SAMPLE_KEYS):
    instance.add_dynamic_partitions("tokenizers", [name])
    res = dg.materialize(
        ASSETS,
        partition_key=name,
        instance=instance,
        resources=resources(),
        selection=dg.AssetSelection.assets(dg.AssetKey(["tokenized", "tokenizers"])),
    )
    assert res.success
    results = []
    for key in keys:
        res = dg.materialize(
            ASSETS,
            instance=instance,
            resources=resources(),
            partition_key=dg.MultiPartitionKey({"tokenizer": name, "segment": key}),
            selection=dg.AssetSelection.assets(dg.AssetKey(["tokenized", "documents"])),
        )
        assert res.success, key
        results.append(res)
    return results


def upstream(instance, lm: str, keys=SAMPLE_KEYS):
    """Partitions of the sample crawl through raw, curated and both dedups: what tokenization reads."""
    materialize_segments(instance, SAMPLE_CRAWL, keys)
    materialize_segments(instance, SAMPLE_CRAWL, keys, selection="curated/documents", lm_path=lm)
    materialize_segments(instance, SAMPLE_CRAWL, keys, selection="dedup/minhash_bands")
    materialize_assets(instance, "curated/exact_duplicates", "dedup/near_duplicates")
    return instance


@pytest.fixture
def pipeline(tokenlake_home, instance, reference_lm_file):
    return upstream(instance, reference_lm_file)


@pytest.fixture
def one_partition(tokenlake_home, instance, reference_lm_file):
    return upstream(instance, reference_lm_file, SAMPLE_KEYS[-1:])


def kept_texts() -> dict[str, str]:
    lakehouse = Lakehouse()
    docs = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", "text", "kept"))
    exact = set(lakehouse.scan(CURATED_EXACT_DUPLICATES)["doc_id"].to_pylist())
    near = lakehouse.scan(DEDUP_NEAR_DUPLICATES)
    near_dup = {d for d, dec in zip(near["doc_id"].to_pylist(), near["decision"].to_pylist()) if dec}
    return {
        d: t
        for d, t, k in zip(docs["doc_id"].to_pylist(), docs["text"].to_pylist(), docs["kept"].to_pylist())
        if k and d not in exact and d not in near_dup
    }


def test_tokens_round_trip_counts_and_a_second_tokenizer(pipeline):
    instance = pipeline
    results = tokenize(instance, "gpt2")
    gpt2 = load_tokenizer(DEFAULT_TOKENIZERS["gpt2"], "gpt2")
    lakehouse = Lakehouse()
    rows = lakehouse.scan(TOKENIZED_DOCUMENTS).to_pylist()
    texts = kept_texts()
    assert texts and sorted(r["doc_id"] for r in rows) == sorted(texts)  # every kept document, nothing else
    # decode(tokens without EOS) == stored text for 100% of kept documents
    assert all(
        decode_document(gpt2, tokens_from_bytes(r["tokens"], r["token_dtype"])) == texts[r["doc_id"]] for r in rows
    )
    # sum of n_tokens == sum(len(encode(text)) + 1), computed with a fresh tokenizer
    fresh = Tokenizer.from_file(DEFAULT_TOKENIZERS["gpt2"])
    fresh.encode_special_tokens = True
    assert sum(r["n_tokens"] for r in rows) == sum(
        len(fresh.encode(t, add_special_tokens=False).ids) + 1 for t in texts.values()
    )
    # the mixture labels are curated's, the classifier's domain label included
    labels = ("language", "ppl_bucket", "host", "domain_class", "domain_confidence")
    curated = {r["doc_id"]: r for r in lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", *labels)).to_pylist()}
    assert all(r[c] == curated[r["doc_id"]][c] for r in rows for c in labels)
    assert all(r["domain_class"] is not None and 0 < r["domain_confidence"] <= 1 for r in rows)
    md = results[0].asset_materializations_for_node("tokenized__documents")[0].metadata
    assert md["tokenizer_id"].value == gpt2.info.tokenizer_id
    checks = [e for r in results for e in r.get_asset_check_evaluations()]
    assert checks and all(c.passed for c in checks)
    # in a tokenize run the check reads only the partition just written
    assert [c.metadata["scope"].value for c in checks] == [f"gpt2 x {k}" for k in SAMPLE_KEYS]

    # a second tokenizer: new rows under a new id; the first tokenizer's rows and snapshot stay readable
    snap_gpt2 = lakehouse.snapshot_id(TOKENIZED_DOCUMENTS)
    tokenize(instance, "olmo2-cl100k")
    cl = load_tokenizer(DEFAULT_TOKENIZERS["olmo2-cl100k"], "olmo2-cl100k")
    now = lakehouse.scan(TOKENIZED_DOCUMENTS)
    by_tid = {tid: now.filter(pc.equal(now["tokenizer_id"], tid)) for tid in set(now["tokenizer_id"].to_pylist())}
    assert set(by_tid) == {gpt2.info.tokenizer_id, cl.info.tokenizer_id}
    assert sorted(by_tid[gpt2.info.tokenizer_id].to_pylist(), key=lambda r: r["doc_id"]) == sorted(
        rows, key=lambda r: r["doc_id"]
    )
    assert set(by_tid[cl.info.tokenizer_id]["token_dtype"].to_pylist()) == {"uint32"}
    assert lakehouse.scan_at(TOKENIZED_DOCUMENTS, snap_gpt2).num_rows == len(rows)
    tok_rows = lakehouse.scan(TOKENIZED_TOKENIZERS).to_pylist()
    assert {r["tokenizer_id"]: r["name"] for r in tok_rows} == {
        gpt2.info.tokenizer_id: "gpt2",
        cl.info.tokenizer_id: "olmo2-cl100k",
    }
    assert [r["tokenizer_json"] for r in tok_rows if r["name"] == "gpt2"] == [gpt2.json_text]


def test_check_names_a_corrupted_document_in_a_copy_of_the_table(one_partition, tmp_path):
    pipeline = one_partition
    tokenize(pipeline, "gpt2", keys=SAMPLE_KEYS[-1:])
    source = Lakehouse()
    copy_cfg = CatalogConfig.embedded(tmp_path / "copy")
    copy = Lakehouse(copy_cfg)
    docs = source.scan(TOKENIZED_DOCUMENTS).to_pylist()
    victim = docs[3]["doc_id"]
    bad = bytearray(docs[3]["tokens"])
    bad[4] ^= 0x01
    docs[3]["tokens"] = bytes(bad)
    write_partition(copy, TOKENIZED_DOCUMENTS, {k: docs[0][k] for k in TOKENIZED_DOCUMENTS.partition_by}, docs)
    for t in (TOKENIZED_TOKENIZERS, CURATED_DOCUMENTS):
        rows = source.scan(t).to_pylist()
        for values in sorted({tuple(r[c] for c in t.partition_by) for r in rows}):
            part = dict(zip(t.partition_by, values))
            write_partition(copy, t, part, [r for r in rows if all(r[c] == v for c, v in part.items())])

    res = dg.materialize(
        ASSETS,
        instance=pipeline,
        raise_on_error=False,
        resources=resources(IcebergCatalogResource(properties=dict(copy_cfg.properties))),
        selection=dg.AssetSelection.checks_for_assets(dg.AssetKey(["tokenized", "documents"])),
    )
    (ev,) = res.get_asset_check_evaluations()
    assert not ev.passed
    bad_ids = [p["doc_id"] for p in ev.metadata["bad_doc_ids"].value]
    assert bad_ids == [victim]
