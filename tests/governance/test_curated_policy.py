"""curated/documents under policies, through real Dagster on a real segment (LEGACY-ARCHIVES/wget-2024): it runs
with the active thresholds version and names it on its snapshot; a Launchpad config that changes a threshold is
an ad-hoc experiment, used as given and stamped `adhoc`; the same thresholds reached either way give the same
rows; provenance names the version that decided a document."""

from __future__ import annotations

import pytest

from assets.governance import policies, proposals
from assets.governance.provenance import provenance
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.digest import comparable, rows_digest
from iceberg_catalog.policy_store import adhoc_label
from iceberg_catalog.schemas import CURATED_DOCUMENTS

from conftest import SAMPLE_CRAWL, materialize_segments

SEGMENT = "LEGACY-ARCHIVES/wget-2024"
WGET = sorted(SAMPLE_CRAWL.rglob("wget-2024/warc/*.warc.gz"))
RELAXED = {"gopher_min_alpha_token_frac": 0.7}
PROV = Provenance("governance/proposals", "test", "test-run", "test", "test")


def curate(instance, root, lm, quality=None) -> tuple[str, dict]:
    """Materialise the segment's curated/documents; (its content digest, the snapshot's tokenlake properties)."""
    config = {"ops": {"curated__documents": {"config": {"quality": quality}}}} if quality else None
    materialize_segments(instance, root, [SEGMENT], run_config=config, selection="curated/documents", lm_path=lm)
    lakehouse = Lakehouse()
    snap = lakehouse.table(CURATED_DOCUMENTS).current_snapshot()
    digest = rows_digest(comparable(lakehouse.scan(CURATED_DOCUMENTS)))
    return digest, Provenance.from_snapshot_summary(snap.summary.additional_properties)


@pytest.mark.slow
def test_curation_runs_under_the_active_version_and_says_which(tokenlake_home, instance, crawl_root, reference_lm_file):
    root = crawl_root({SEGMENT: {p.name: p for p in WGET}})
    materialize_segments(instance, root, [SEGMENT])
    default, props = curate(instance, root, reference_lm_file)
    assert props["policy-version"] == "thresholds/0"
    assert props["policy-sha256"] == policies.builtin("thresholds").sha256

    adhoc, props = curate(instance, root, reference_lm_file, quality=RELAXED)
    assert (
        props["policy-version"] == adhoc_label("thresholds") and adhoc != default
    )  # the experiment keeps more documents
    lakehouse = Lakehouse()
    doc = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id",)).to_pylist()[0]["doc_id"]
    assert provenance(lakehouse, doc_id=doc)[0]["decided_by_policy"]["policy_version"] == adhoc_label("thresholds")

    base = policies.active(lakehouse, "thresholds")
    new = proposals.set_threshold(base.policy, "gopher_min_alpha_token_frac", 0.7)
    v1 = policies.activate(lakehouse, "thresholds", new, "agent:tuner", "alice", "prop-test", PROV)
    governed, props = curate(instance, root, reference_lm_file)
    assert props["policy-version"] == "thresholds/1" and props["policy-sha256"] == v1.sha256
    assert governed == adhoc  # the same thresholds, by config or by policy: the same rows
    assert provenance(lakehouse, doc_id=doc)[0]["decided_by_policy"]["policy_version"] == "thresholds/1"
    snapshots = lakehouse.table(CURATED_DOCUMENTS).snapshots()
    versions = {s.summary.additional_properties.get("tokenlake.policy-version") for s in snapshots}
    assert versions == {
        "thresholds/0",
        adhoc_label("thresholds"),
        "thresholds/1",
    }  # old snapshots keep their version
