"""quarantine/* through Dagster: benchmarks as data; a new benchmark flags documents already curated."""

from __future__ import annotations

import json

import dagster as dg
from conftest import SAMPLE_CRAWL, materialize_segments

from iceberg_catalog import Provenance, open_catalog

KEY = "LEGACY-ARCHIVES/wget-2024"


def run(instance, benchmark: str, extra=None, keys=(KEY,)):
    from orchestration.definitions import defs
    from resources import EvalBenchmarksResource, IcebergCatalogResource

    instance.add_dynamic_partitions("benchmarks", [benchmark])
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
    resources = {**defs.resources, "catalog": IcebergCatalogResource(),
                 "benchmarks": EvalBenchmarksResource(extra=extra or [])}
    assert dg.materialize(assets, instance=instance, resources=resources, partition_key=benchmark,
                          selection=dg.AssetSelection.assets(dg.AssetKey(["quarantine", "eval_items"]))).success
    for key in keys:
        res = dg.materialize(assets, instance=instance, resources=resources,
                             partition_key=dg.MultiPartitionKey({"benchmark": benchmark, "segment": key}),
                             selection=dg.AssetSelection.assets(dg.AssetKey(["quarantine", "matches"])))
        assert res.success
    return res


def test_shipped_benchmarks_are_items(tokenlake_home, instance, reference_lm_file):
    materialize_segments(instance, SAMPLE_CRAWL, [KEY])
    materialize_segments(instance, SAMPLE_CRAWL, [KEY], selection="curated/documents", lm_path=reference_lm_file)
    res = run(instance, "gsm8k")
    items = open_catalog().load_table("quarantine.eval_items").scan().to_arrow()
    assert items.num_rows == 1319 and set(items["benchmark"].to_pylist()) == {"gsm8k"}
    md = res.asset_materializations_for_node("quarantine__matches")[0].metadata
    assert md["documents_checked"].value > 0 and md["contaminated_documents"].value == 0
    # the screening itself is data: run views read their quarantine coverage from it
    [screening] = open_catalog().load_table("quarantine.screenings").scan().to_arrow().to_pylist()
    assert (screening["benchmark"], f"{screening['crawl']}/{screening['segment']}") == ("gsm8k", KEY)
    assert screening["documents_checked"] == md["documents_checked"].value and screening["matches"] == 0


def test_a_new_benchmark_flags_an_already_curated_document(tokenlake_home, instance, reference_lm_file, tmp_path):
    materialize_segments(instance, SAMPLE_CRAWL, [KEY])
    materialize_segments(instance, SAMPLE_CRAWL, [KEY], selection="curated/documents", lm_path=reference_lm_file)
    docs = open_catalog().load_table("curated.documents").scan(selected_fields=("doc_id", "text", "kept")).to_arrow()
    victim = next(r for r in docs.to_pylist() if r["kept"])
    words = victim["text"].split()
    # an "evaluation item" that quotes 30 consecutive words of a page curated earlier, with other text around it
    item = "Question: " + " ".join(words[40:70]) + " What is the answer?"
    path = tmp_path / "new_bench.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": item, "answer": "42"}) + "\n"
                    + json.dumps({"id": "q2", "question": "A question that appears in no web page at all, "
                                  "about zebras computing eigenvalues on Tuesdays.", "answer": "7"}) + "\n")
    from resources import BenchmarkSourceConfig

    extra = [BenchmarkSourceConfig(name="new_bench", path=str(path), format="jsonl", fields=["question", "answer"],
                                   id_field="id")]
    curated_snap = open_catalog().load_table("curated.documents").current_snapshot().snapshot_id
    run(instance, "new_bench", extra)
    found = open_catalog().load_table("quarantine.matches").scan().to_arrow().to_pylist()
    assert [(r["doc_id"], r["item_id"], r["decision"]) for r in found] == [
        (victim["doc_id"], "new_bench/test/q1", "eval_contaminated")]
    span = victim["text"][found[0]["char_start"]:found[0]["char_end"]]
    assert " ".join(words[45:60]) in " ".join(span.split())
    # nothing upstream was recomputed
    assert open_catalog().load_table("curated.documents").current_snapshot().snapshot_id == curated_snap
    prov = Provenance.from_snapshot_summary(
        open_catalog().load_table("quarantine.matches").current_snapshot().summary.additional_properties)
    assert str(curated_snap) in prov["upstream-snapshot-ids"]
