"""Deletion propagation through real Dagster jobs and sensors on a real lakehouse with a published run view
(tests/run_view/builders.py): coverage refusal, supersede + rebuild, erasure proof, idempotence."""

from __future__ import annotations

import dagster as dg
import pytest
from pyiceberg.expressions import EqualTo

import loader
from assets.governance.propagate import ErasureCoverageError, plan
from assets.governance.requests import load_request
from assets.run_view import store
from iceberg_catalog import TABLES
from iceberg_catalog.erasure import ERASURE_KEY, erasure
from iceberg_catalog.maintenance import count_matching_in_retained_snapshots, find_bytes_in_files
from iceberg_catalog.run_view_contract import tag_name
from iceberg_catalog.schemas import CURATED_DOCUMENTS, TOKENIZED_DOCUMENTS
from resources import IcebergCatalogResource, lineage_resource
from tests.run_view import builders
from tests.run_view.test_gate import candidate_metadata, decide, materialize_candidate


def _defs():
    from orchestration.definitions import defs

    return defs


def request(instance, key_type: str, value: str, defs=None) -> str:
    res = (
        (defs or _defs())
        .resolve_job_def("request_deletion")
        .execute_in_process(
            instance=instance,
            run_config={
                "ops": {
                    "record_deletion_request": {
                        "config": {
                            "key_type": key_type,
                            "value": value,
                            "reason": "takedown",
                            "requested_by": "legal@example.org",
                        }
                    }
                }
            },
        )
    )
    return res.output_for_node("record_deletion_request")


def tick(instance, name: str) -> list[dg.RunRequest]:
    sensor = _defs().resolve_sensor_def(name)
    with dg.build_sensor_context(instance=instance, resources={"catalog": IcebergCatalogResource()}) as ctx:
        result = sensor(ctx)
    return [] if isinstance(result, dg.SkipReason) else list(result)


def run(instance, job: str, req: dg.RunRequest) -> dg.ExecuteInProcessResult:
    """Execute what a sensor requested, as the daemon would launch it."""
    return (
        _defs()
        .resolve_job_def(job)
        .execute_in_process(instance=instance, run_config=req.run_config, raise_on_error=False)
    )


def snapshot_state(lakehouse) -> dict[str, tuple]:
    return {ident: (lakehouse.table(t).metadata_location,) for ident, t in TABLES.items()}


def rows_of(lakehouse, ident: str, row_filter) -> int:
    return lakehouse.scan(TABLES[ident], row_filter=row_filter).num_rows


@pytest.fixture
def published(lakehouse, instance):
    """A lakehouse with 30 documents and a run view published through the real gate."""
    docs = builders.write_documents(lakehouse, n_docs=30)
    builders.screen(lakehouse)
    md = candidate_metadata(materialize_candidate(instance, name="gov"))
    assert decide(instance, md["run_view_id"], md["manifest_sha256"]).success
    return lakehouse, docs, md["run_view_id"]


def test_url_deletion_supersedes_rebuilds_and_erases(published, instance, tokenlake_home):
    lakehouse, docs, rv_id = published
    victim, other = docs[3], docs[4]
    assert victim["doc_id"] in store.read_samples(lakehouse, rv_id)["doc_id"].to_pylist()
    secret = victim["text"][40:120].encode()
    warehouse = str(tokenlake_home)
    assert find_bytes_in_files(warehouse, [secret])  # the search can find it before erasure
    unrelated_before = {
        ident: rows_of(lakehouse, ident, EqualTo("doc_id", other["doc_id"]))
        for ident in ("curated.documents", "tokenized.documents")
    }

    rid = request(instance, "url", victim["url"])
    assert load_request(lakehouse, rid)["status"] == "pending"
    [req] = tick(instance, "deletion_requests")
    assert req.run_key == rid
    res = run(instance, "propagate_deletion", req)
    assert res.success
    report = res.output_for_node("propagate")
    assert report["erased"] and report["superseded_run_views"] == [rv_id]
    assert report["tables"]["tokenized.documents"]["rows_deleted"] == 1
    assert report["tables"]["curated.documents"]["rows_deleted"] == 1
    assert report["tables"]["run_view.samples"]["rows_deleted"] >= 1

    # every commit of the propagation carries the request id
    for ident in ("curated.documents", "tokenized.documents", "run_view.samples"):
        summary = lakehouse.table(TABLES[ident]).current_snapshot().summary.additional_properties
        assert summary["tokenlake.deletion-request-id"] == rid, ident

    # 0 matching rows in every table at every retained snapshot, and the text in no file on disk
    for ident in ("curated.documents", "tokenized.documents", "run_view.samples"):
        table = lakehouse.table(TABLES[ident])
        counts = count_matching_in_retained_snapshots(table, EqualTo("doc_id", victim["doc_id"]))
        assert counts and sum(counts.values()) == 0, ident
    assert find_bytes_in_files(warehouse, [secret]) == []
    assert {
        ident: rows_of(lakehouse, ident, EqualTo("doc_id", other["doc_id"])) for ident in unrelated_before
    } == unrelated_before
    assert all(tag_name(rv_id) not in lakehouse.table(t).refs() for t in TABLES.values())

    # the view is superseded: the loader refuses it, naming the request
    row = store.load_manifest(lakehouse, rv_id)
    assert (row["status"], row["superseded_by_request"]) == ("superseded", rid)
    with pytest.raises(loader.RunViewSuperseded, match=rid):
        loader.open_run_view(rv_id, catalog=lakehouse)
    refused = decide(instance, rv_id, row["manifest_sha256"], reviewer="mallory")  # the gate refuses it too
    assert not refused.success and store.load_manifest(lakehouse, rv_id)["status"] == "superseded"

    # a rebuilt candidate without the document, waiting for approval
    [rebuild] = tick(instance, "superseded_run_views")
    built = run(instance, "run_view_candidate", rebuild)
    assert built.success
    new = candidate_metadata(built)
    new_row = store.load_manifest(lakehouse, new["run_view_id"])
    assert (new_row["status"], new_row["supersedes"]) == ("candidate", rv_id)
    assert victim["doc_id"] not in store.read_samples(lakehouse, new["run_view_id"])["doc_id"].to_pylist()
    assert tick(instance, "superseded_run_views") == []
    assert decide(instance, new["run_view_id"], new["manifest_sha256"], reviewer="frank").success

    # the request is completed and re-running it changes nothing in any table
    assert load_request(lakehouse, rid)["status"] == "completed"
    assert tick(instance, "deletion_requests") == []
    before = snapshot_state(lakehouse)
    again = run(instance, "propagate_deletion", req)
    assert again.success and again.output_for_node("propagate")["rows_deleted"] == 0
    assert snapshot_state(lakehouse) == before


def test_a_request_matching_nothing_completes_with_an_empty_report(published, instance):
    lakehouse, _, rv_id = published
    before = {i: lakehouse.table(t).metadata_location for i, t in TABLES.items() if i != "governance.deletion_requests"}
    rid = request(instance, "domain", "no-such-site.example")
    [req] = tick(instance, "deletion_requests")
    res = run(instance, "propagate_deletion", req)
    assert res.success
    report = res.output_for_node("propagate")
    assert report["rows_deleted"] == 0 and report["superseded_run_views"] == [] and report["erased"]
    assert report["lineage_keys"] == {"record_id": 0, "deletion_key": 0, "doc_id": 0}
    assert load_request(lakehouse, rid)["status"] == "completed"
    assert {i: lakehouse.table(TABLES[i]).metadata_location for i in before} == before
    assert store.load_manifest(lakehouse, rv_id)["status"] == "published"


def test_a_derived_asset_without_deletion_support_makes_propagation_refuse(published, instance):
    lakehouse, docs, rv_id = published
    from assets.curated.defs import DOCUMENTS

    @dg.asset(key=["curated", "summaries"], deps=[DOCUMENTS])
    def summaries():  # a new derived table that forgot to declare how its rows are erased
        return None

    base = _defs()
    defs = dg.Definitions(
        assets=[*base.assets, summaries],
        asset_checks=base.asset_checks,
        jobs=base.jobs,
        resources={**base.resources, "lineage": lineage_resource(lambda: defs)},
    )
    rid = request(instance, "doc_id", docs[0]["doc_id"], defs)
    res = defs.resolve_job_def("propagate_deletion").execute_in_process(
        instance=instance, run_config={"ops": {"propagate": {"config": {"request_id": rid}}}}, raise_on_error=False
    )
    assert not res.success
    failure = next(e for e in res.all_events if e.event_type_value == "STEP_FAILURE")
    assert "curated/summaries" in failure.step_failure_data.error.message
    assert rows_of(lakehouse, "tokenized.documents", EqualTo("doc_id", docs[0]["doc_id"])) == 1
    assert store.load_manifest(lakehouse, rv_id)["status"] == "published"


def test_plan_validates_declarations():
    with pytest.raises(ErasureCoverageError, match="x/y"):
        plan({"x/y": None})
    # declarations read back from the asset graph are checked again (metadata can be written by hand)
    with pytest.raises(ErasureCoverageError, match="cannot be matched on"):
        plan({"a": {"tables": [{"table": "curated.documents", "columns": ["url"]}], "run_views": False}})
    with pytest.raises(ErasureCoverageError, match="unknown table"):
        plan({"a": {"tables": [{"table": "curated.nope", "columns": ["doc_id"]}], "run_views": False}})
    with pytest.raises(ValueError, match="cannot match rows on"):
        erasure((CURATED_DOCUMENTS, ["url"]))
    targets = plan(
        {
            "b": erasure((TOKENIZED_DOCUMENTS, ["doc_id"]))[ERASURE_KEY],
            "a": erasure((CURATED_DOCUMENTS, ["doc_id", "record_id"]))[ERASURE_KEY],
        }
    )
    assert [(t.asset_key, t.table, t.columns) for t in targets] == [
        ("a", CURATED_DOCUMENTS, ("doc_id", "record_id")),
        ("b", TOKENIZED_DOCUMENTS, ("doc_id",)),
    ]
