"""dedup/embeddings as plan -> task -> commit (no Dagster): one float16 vector per kept English document, with
the model's id and sha256, independent of the slicing and batching; and the Dagster asset that runs it."""

from __future__ import annotations

import uuid

import dagster as dg
import numpy as np

from assets.dedup import embeddings_table
from assets.dedup.defs import EMBEDDINGS, defs
from assets.dedup.embeddings_table import EmbeddingParams, vectors_from_binary, vectors_to_binary
from assets.embeddings import EMBEDDING_MODEL, embed, model_sha256
from assets.quarantine.semantic import web_texts
from iceberg_catalog import Lakehouse, Provenance, config_hash
from iceberg_catalog.digest import table_digest
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_EMBEDDINGS
from resources import IcebergCatalogResource
from resources.executor import TaskExecutorResource
from tests.dedup.documents import doc_id, write_documents

PROV = Provenance("dedup/embeddings", None, "test", "test", config_hash({}))


def english_and_other(lakehouse, n: int = 30) -> dict[str, str]:
    """CRAWL-A/s: `n` real web pages in English (one dropped); CRAWL-A/t: the same pages marked German.
    {doc_id: text} of the documents that must be embedded."""
    texts = web_texts()[:n]
    en = [(doc_id(t, "en"), t, k != 3) for k, t in enumerate(texts)]
    write_documents(lakehouse, "CRAWL-A", "s", en, files=3, language="en")
    write_documents(lakehouse, "CRAWL-A", "t", [(doc_id(t, "de"), t, True) for t in texts], files=1, language="de")
    return {d: t for d, t, kept in en if kept}


def embed_segment(lakehouse, segment: str, params: EmbeddingParams = EmbeddingParams(), reverse: bool = False):
    snapshot = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    tasks = embeddings_table.plan(lakehouse, "CRAWL-A", segment, snapshot, params, uuid.uuid4().hex)
    results = [embeddings_table.run_task(t) for t in tasks]
    embeddings_table.commit(lakehouse, "CRAWL-A", segment, results[::-1] if reverse else results, PROV)
    return tasks, results


def test_rows_are_the_kept_english_documents_vectors_with_the_model(lakehouse):
    expected = english_and_other(lakehouse)
    _, results = embed_segment(lakehouse, "s")
    embed_segment(lakehouse, "t")
    assert embeddings_table.totals(results) == {"documents": len(expected)}
    rows = lakehouse.scan(DEDUP_EMBEDDINGS)
    assert sorted(rows["doc_id"].to_pylist()) == sorted(expected)  # no dropped, no German document
    assert set(rows["model"].to_pylist()) == {EMBEDDING_MODEL}
    assert set(rows["model_sha256"].to_pylist()) == {model_sha256()}
    stored = vectors_from_binary(rows["vector"])
    exact = embed([expected[d] for d in rows["doc_id"].to_pylist()])
    assert stored.shape == exact.shape == (len(expected), 256)
    assert np.array_equal(stored, exact.astype(np.float16).astype(np.float32))
    # the measured cost of float16: cosines within 2e-4 of float32's
    cos16, cos32 = stored.astype(np.float64) @ stored.T.astype(np.float64), exact @ exact.T
    assert np.abs(cos16 - cos32).max() < 2e-4


def test_the_table_does_not_depend_on_slicing_batching_or_commit_order(lakehouse):
    english_and_other(lakehouse)
    seen = []
    for params, reverse in ((EmbeddingParams(), False), (EmbeddingParams(3, 10), True)):
        tasks, _ = embed_segment(lakehouse, "s", params, reverse)
        seen.append((len(tasks), table_digest(lakehouse, DEDUP_EMBEDDINGS)))
    assert [n for n, _ in seen] == [3, 1] and seen[0][1] == seen[1][1]


def test_vectors_round_trip_through_binary():
    e = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    column = vectors_to_binary(e)
    assert len(column[0].as_py()) == 8
    assert np.array_equal(vectors_from_binary(column), e.astype(np.float16).astype(np.float32))
    assert np.array_equal(vectors_from_binary(column.slice(2)), vectors_from_binary(column)[2:])


def test_the_asset_embeds_one_segment(lakehouse):
    expected = english_and_other(lakehouse, n=12)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("crawl_segments", ["CRAWL-A/s"])
        result = dg.materialize(
            list(defs.assets),
            instance=instance,
            resources={"catalog": IcebergCatalogResource(), "executor": TaskExecutorResource()},
            partition_key="CRAWL-A/s",
            selection=dg.AssetSelection.assets(EMBEDDINGS),
        )
    [mat] = result.asset_materializations_for_node("dedup__embeddings")
    assert mat.metadata["dagster/row_count"].value == len(expected)
    assert Lakehouse().scan(DEDUP_EMBEDDINGS).num_rows == len(expected)
