"""quarantine/* through Dagster: benchmarks as data; a new benchmark flags documents already curated."""

from __future__ import annotations

import json

import dagster as dg

from assets.quarantine.defs import defs as quarantine_defs
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.schemas import CURATED_DOCUMENTS, QUARANTINE_EVAL_ITEMS, QUARANTINE_MATCHES, QUARANTINE_SCREENINGS
from resources import BenchmarkSourceConfig, EvalBenchmarksResource, IcebergCatalogResource
from resources.executor import TaskExecutorResource

from conftest import SAMPLE_CRAWL, materialize_segments

KEY = "LEGACY-ARCHIVES/wget-2024"


def run(instance, benchmark: str, extra=None, keys=(KEY,)):
    instance.add_dynamic_partitions("benchmarks", [benchmark])
    assets = list(quarantine_defs.assets)
    resources = {
        "catalog": IcebergCatalogResource(),
        "executor": TaskExecutorResource(),
        "benchmarks": EvalBenchmarksResource(extra=extra or []),
    }
    assert dg.materialize(
        assets,
        instance=instance,
        resources=resources,
        partition_key=benchmark,
        selection=dg.AssetSelection.assets(dg.AssetKey(["quarantine", "eval_items"])),
    ).success
    for key in keys:
        res = dg.materialize(
            assets,
            instance=instance,
            resources=resources,
            partition_key=dg.MultiPartitionKey({"benchmark": benchmark, "segment": key}),
            selection=dg.AssetSelection.assets(dg.AssetKey(["quarantine", "matches"])),
        )
        assert res.success
    return res


def test_shipped_benchmarks_are_items(tokenlake_home, instance, reference_lm_file):
    materialize_segments(instance, SAMPLE_CRAWL, [KEY])
    materialize_segments(instance, SAMPLE_CRAWL, [KEY], selection="curated/documents", lm_path=reference_lm_file)
    res = run(instance, "gsm8k")
    items = Lakehouse().scan(QUARANTINE_EVAL_ITEMS)
    assert items.num_rows == 1319 and set(items["benchmark"].to_pylist()) == {"gsm8k"}
    md = res.asset_materializations_for_node("quarantine__matches")[0].metadata
    assert md["documents_checked"].value > 0 and md["contaminated_documents"].value == 0
    # counts per kind, the semantic kind included, and a table of semantic examples (empty here)
    assert [md[f"matches_{k}"].value for k in ("ngram", "near", "semantic")] == [0, 0, 0]
    assert md["semantic_examples"].value.startswith("| doc_id | item_id | score | document | item |")
    # the screening itself is data: run views read their quarantine coverage from it
    [screening] = Lakehouse().scan(QUARANTINE_SCREENINGS).to_pylist()
    assert (screening["benchmark"], f"{screening['crawl']}/{screening['segment']}") == ("gsm8k", KEY)
    assert screening["documents_checked"] == md["documents_checked"].value and screening["matches"] == 0


def test_a_new_benchmark_flags_an_already_curated_document(tokenlake_home, instance, reference_lm_file, tmp_path):
    materialize_segments(instance, SAMPLE_CRAWL, [KEY])
    materialize_segments(instance, SAMPLE_CRAWL, [KEY], selection="curated/documents", lm_path=reference_lm_file)
    lakehouse = Lakehouse()
    docs = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", "text", "kept"))
    victim = next(r for r in docs.to_pylist() if r["kept"])
    words = victim["text"].split()
    # an "evaluation item" that quotes 30 consecutive words of a page curated earlier, with other text around it
    item = "Question: " + " ".join(words[40:70]) + " What is the answer?"
    path = tmp_path / "new_bench.jsonl"
    path.write_text(
        json.dumps({"id": "q1", "question": item, "answer": "42"})
        + "\n"
        + json.dumps(
            {
                "id": "q2",
                "question": "A question that appears in no web page at all, "
                "about zebras computing eigenvalues on Tuesdays.",
                "answer": "7",
            }
        )
        + "\n"
    )
    extra = [
        BenchmarkSourceConfig(
            name="new_bench", path=str(path), format="jsonl", fields=["question", "answer"], id_field="id"
        )
    ]
    curated_snap = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    run(instance, "new_bench", extra)
    found = lakehouse.scan(QUARANTINE_MATCHES).to_pylist()
    assert [(r["doc_id"], r["item_id"], r["decision"]) for r in found] == [
        (victim["doc_id"], "new_bench/test/q1", "eval_contaminated")
    ]
    span = victim["text"][found[0]["char_start"] : found[0]["char_end"]]
    assert " ".join(words[45:60]) in " ".join(span.split())
    # nothing upstream was recomputed
    assert lakehouse.snapshot_id(CURATED_DOCUMENTS) == curated_snap
    prov = Provenance.from_snapshot_summary(
        lakehouse.table(QUARANTINE_MATCHES).current_snapshot().summary.additional_properties
    )
    assert str(curated_snap) in prov["upstream-snapshot-ids"]
