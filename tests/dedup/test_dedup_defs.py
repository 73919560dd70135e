"""The dedup state's Dagster shell (assets.dedup.defs alone, without the other states' definitions): configs
generated from the pure knobs, the jobs, and the same tables whatever the task grouping."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.dedup.defs import (
    EMBEDDINGS,
    MINHASH_BANDS,
    MINHASH_SIGNATURES,
    NEAR_DUPLICATES,
    SEMANTIC_LINKS,
    SPLIT_ASSIGNMENTS,
    MinHashConfig,
    NearDuplicateConfig,
    defs,
)
from iceberg_catalog import schemas as T
from iceberg_catalog.digest import table_digest
from iceberg_catalog.schemas import DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES, DEDUP_NEAR_DUPLICATES
from resources import IcebergCatalogResource
from resources.executor import TaskExecutorResource
from tests.dedup.documents import two_crawls

KEYS = ["CRAWL-A/s", "CRAWL-B/s"]
RESOURCES = {"catalog": IcebergCatalogResource(), "executor": TaskExecutorResource()}
TABLES = (DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES, DEDUP_NEAR_DUPLICATES)


def materialize(instance, keys: list[dg.AssetKey], partition: str | None = None, config: dict | None = None):
    op = "dedup_minhash" if partition else "dedup__near_duplicates"
    return dg.materialize(
        list(defs.assets),
        instance=instance,
        resources=RESOURCES,
        partition_key=partition,
        selection=dg.AssetSelection.assets(*keys),
        run_config={"ops": {op: {"config": config}}} if config else None,
    )


def build(instance, files_per_slice: int) -> dict:
    """Both segments hashed, then near duplicates; the digests of the three tables and the tasks per segment."""
    tasks = []
    for key in KEYS:
        res = materialize(instance, [MINHASH_BANDS, MINHASH_SIGNATURES], key, {"files_per_slice": files_per_slice})
        tasks.append(res.asset_materializations_for_node("dedup_minhash")[0].metadata["tasks"].value)
    res = materialize(instance, [NEAR_DUPLICATES])
    assert res.asset_materializations_for_node("dedup__near_duplicates")[0].metadata["near_duplicates"].value > 0
    from iceberg_catalog import Lakehouse

    return {"tasks": tasks, **{t.identifier: table_digest(Lakehouse(), t) for t in TABLES}}


def test_one_task_or_one_per_file_give_the_same_tables(lakehouse, instance):
    two_crawls(lakehouse, files=3)
    instance.add_dynamic_partitions("crawl_segments", KEYS)
    per_file, whole = build(instance, 1), build(instance, 10)
    assert per_file.pop("tasks") == [3, 3] and whole.pop("tasks") == [1, 1]
    assert per_file == whole


def test_configs_are_generated_from_the_knobs():
    assert MinHashConfig().model_dump() == {
        "n_grams": 5,
        "bands": 14,
        "rows": 8,
        "seed": 1,
        "batch_docs": 2000,
        "workers": 1,
        "files_per_slice": 1,
    }
    assert NearDuplicateConfig().model_dump() == {
        "threshold": 0.8,
        "verify": "exact",
        "n_grams": 5,
        "docs_per_task": 1_000_000,
        "docs_per_partition": 250_000,
        "partitions": 0,
    }
    assert "exact | estimated | none" in NearDuplicateConfig.model_fields["verify"].description


def test_a_bad_verify_mode_is_refused_before_the_run_naming_the_value(tokenlake_home, instance):
    with pytest.raises(dg.DagsterInvalidConfigError, match="bogus"):
        materialize(instance, [NEAR_DUPLICATES], config={"verify": "bogus"})


def test_jobs_group_pool_and_erasure():
    assert {j.name for j in defs.jobs} == {"minhash", "near_dedup", "embed", "split_clusters"}
    by_key = {key: a for a in defs.assets for key in a.keys}
    split_keys = {SEMANTIC_LINKS, SPLIT_ASSIGNMENTS}
    assert set(by_key) == {MINHASH_BANDS, MINHASH_SIGNATURES, NEAR_DUPLICATES, EMBEDDINGS, *split_keys}
    for key, assets_def in by_key.items():
        assert assets_def.group_names_by_key[key] == "dedup" and assets_def.op.pool == "iceberg_dedup"
        metadata = assets_def.metadata_by_key[key]
        tables = [e["table"] for e in metadata["tokenlake/erasure"]["tables"]]
        assert tables == [metadata["iceberg_table"]] and tables[0].startswith("dedup.")


def test_split_clusters_run_crawl_by_crawl_after_the_embeddings(lakehouse, instance):
    """The embed job per segment, then split_clusters: every kept English document assigned; a second run with
    every crawl assigned commits nothing."""
    from assets.dedup.semantic_clusters import split_cluster_ids
    from iceberg_catalog import Lakehouse
    from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_SPLIT_ASSIGNMENTS
    from tests.dedup.documents import doc_id, write_documents
    from tests.run_view.builders import paragraphs

    texts = paragraphs()[:30]
    write_documents(lakehouse, "CRAWL-A", "s", [(doc_id(t, "A"), t, True) for t in texts[:20]], language="en")
    write_documents(lakehouse, "CRAWL-B", "s", [(doc_id(t, "B"), t, True) for t in texts[20:]], language="en")
    instance.add_dynamic_partitions("crawl_segments", KEYS)
    for key in KEYS:
        dg.materialize(
            list(defs.assets),
            instance=instance,
            resources=RESOURCES,
            partition_key=key,
            selection=dg.AssetSelection.assets(EMBEDDINGS),
        )
    config = {"links": {"centroids": 2, "sample_docs": 100, "tasks": 2}}
    run = dict(
        instance=instance,
        resources=RESOURCES,
        selection=dg.AssetSelection.assets(SEMANTIC_LINKS, SPLIT_ASSIGNMENTS),
        run_config={"ops": {"dedup_split_clusters": {"config": config}}},
    )
    first = dg.materialize(list(defs.assets), **run)
    keys = {m.asset_key for m in first.asset_materializations_for_node("dedup_split_clusters")}
    assert keys == {SEMANTIC_LINKS, SPLIT_ASSIGNMENTS}
    lake = Lakehouse()
    assert lake.scan(DEDUP_SPLIT_ASSIGNMENTS).num_rows == 30
    assert len(split_cluster_ids(lake, lake.snapshot_ids([CURATED_DOCUMENTS]), 0.75)) == 30
    again = dg.materialize(list(defs.assets), **run)
    assert again.asset_materializations_for_node("dedup_split_clusters") == []


def test_deletion_propagation_reaches_the_split_tables():
    """Every asset downstream of raw must declare its erasure, or propagation refuses to start: the split tables
    with document rows are erased by doc_id (the centroids, an aggregate, are a side table of the links)."""
    from assets.governance.deletion_defs import erasure_declarations
    from assets.governance.propagate import plan
    from orchestration.definitions import defs as all_defs

    targets = {t.table.identifier: t.columns for t in plan(erasure_declarations(all_defs.resolve_asset_graph()))}
    for t in (T.DEDUP_EMBEDDINGS, T.DEDUP_SEMANTIC_LINKS, T.DEDUP_SPLIT_ASSIGNMENTS):
        assert targets[t.identifier] == ("doc_id",)
