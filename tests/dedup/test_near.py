"""dedup/near_duplicates as plan -> run -> commit (no Dagster), checked against the in-memory reference LSH."""

from __future__ import annotations

import re
import uuid

import numpy as np
import pytest

from assets.dedup import near, signatures
from assets.dedup.clustering import cluster_crawl_ordered
from assets.dedup.minhash import band_hashes, exact_jaccard, shingles
from assets.dedup.near import NearDuplicateParams
from assets.dedup.signatures import SignatureParams
from iceberg_catalog import Provenance, config_hash
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_MINHASH_BANDS, DEDUP_NEAR_DUPLICATES
from tests.dedup.documents import two_crawls
from tests.dedup.reference import candidate_pairs, signature

PROV = Provenance("dedup/near_duplicates", None, "test", "test", config_hash({}))


def hash_segments(lakehouse, params: SignatureParams = SignatureParams()) -> None:
    snap = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    for crawl in ("CRAWL-A", "CRAWL-B"):
        tasks = signatures.plan(lakehouse, crawl, "s", snap, params, uuid.uuid4().hex)
        signatures.commit(
            lakehouse, crawl, "s", [signatures.run_task(t) for t in tasks], {t: PROV for t in signatures.TABLES}
        )


def near_duplicates(lakehouse, params: NearDuplicateParams = NearDuplicateParams()) -> tuple[dict, list[dict]]:
    plan = near.plan(lakehouse, params, uuid.uuid4().hex)
    result = near.run(plan)
    commit = near.commit(lakehouse, result, PROV)
    assert commit.rows == result.stats["rows"]
    return result.stats, lakehouse.scan(DEDUP_NEAR_DUPLICATES).sort_by("doc_id").to_pylist()


@pytest.fixture
def hashed(lakehouse):
    two_crawls(lakehouse)
    hash_segments(lakehouse)
    return lakehouse


def reference_rows(lakehouse, threshold: float = 0.8) -> list[dict]:
    """The same clusters from the reference LSH over every hashed document, verified by exact Jaccard."""
    docs = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", "crawl", "segment", "text", "kept")).to_pylist()
    docs = sorted((d for d in docs if d["kept"] and shingles(d["text"])), key=lambda d: (d["crawl"], d["doc_id"]))
    sets = [set(shingles(d["text"])) for d in docs]
    pairs = [
        p
        for p in candidate_pairs([band_hashes(signature(d["text"])) for d in docs])
        if exact_jaccard(sets[p[0]], sets[p[1]]) >= threshold
    ]
    crawls = [d["crawl"] for d in docs]
    starts = [i for i in range(len(docs)) if i == 0 or crawls[i] != crawls[i - 1]]
    clusters = cluster_crawl_ordered(starts, len(docs), np.array(sorted(pairs), np.int64).reshape(-1, 2))
    rows = []
    for i, d in enumerate(docs):
        if clusters.size[i] > 1:
            canonical = docs[clusters.cluster_of[i]]["doc_id"]
            dup = bool(clusters.is_duplicate()[i])
            rows.append(
                {
                    "doc_id": d["doc_id"],
                    "crawl": d["crawl"],
                    "segment": d["segment"],
                    "decision": "near_duplicate" if dup else None,
                    "cluster_id": canonical,
                    "cluster_size": int(clusters.size[i]),
                    "duplicate_of": canonical if dup else None,
                }
            )
    return sorted(rows, key=lambda r: r["doc_id"])


def test_near_duplicates_equal_the_reference_and_point_to_the_earlier_crawl(hashed):
    stats, rows = near_duplicates(hashed)
    assert rows == reference_rows(hashed)
    dups = [r for r in rows if r["decision"]]
    assert dups and {r["crawl"] for r in dups} == {"CRAWL-B"}
    assert {r["crawl"] for r in rows if not r["decision"]} == {"CRAWL-A"}
    assert stats["documents"] == 24 + 30 and stats["bands"] == 14
    assert stats["near_duplicates"] == len(dups) and stats["near_duplicates_by_crawl"] == {"CRAWL-B": len(dups)}
    assert stats["clusters"] == len({r["cluster_id"] for r in rows}) <= 2
    assert stats["candidate_pairs"] >= stats["verified_pairs"] > 0


def test_cheaper_verification_only_adds_duplicates(hashed):
    exact = {r["doc_id"] for r in near_duplicates(hashed)[1]}
    estimated = {r["doc_id"] for r in near_duplicates(hashed, NearDuplicateParams(verify="estimated"))[1]}
    stats, unverified = near_duplicates(hashed, NearDuplicateParams(verify="none"))
    assert estimated and {r["doc_id"] for r in unverified} >= exact | estimated
    assert stats["verified_pairs"] == stats["candidate_pairs"]


def test_the_plan_reads_its_inputs_at_the_snapshots_it_pinned(hashed):
    plan = near.plan(hashed, NearDuplicateParams(), "pinned")
    assert plan.snapshot_ids == hashed.snapshot_ids(near.INPUTS)
    _, before = near_duplicates(hashed)
    hash_segments(hashed, SignatureParams(seed=2, bands=20, rows=2))  # every band hash changes
    assert len(near.plan(hashed, NearDuplicateParams(), "now").bands) == 20
    near.commit(hashed, near.run(plan), PROV)
    assert hashed.scan(DEDUP_NEAR_DUPLICATES).sort_by("doc_id").to_pylist() == before


def test_band_count_from_file_statistics_equals_a_scan(hashed):
    snap = hashed.snapshot_id(DEDUP_MINHASH_BANDS)
    assert near.band_count(hashed, snap) == near.scanned_band_count(hashed, snap) == 14
    assert near.band_count(hashed, None) == near.scanned_band_count(hashed, None) == 0


def test_nothing_hashed_yet_gives_an_empty_table(lakehouse):
    stats, rows = near_duplicates(lakehouse)
    assert rows == [] and stats["documents"] == 0 and stats["bands"] == 0
    assert lakehouse.snapshot_id(DEDUP_NEAR_DUPLICATES) is not None


def test_params():
    assert NearDuplicateParams().hashed() == {"threshold": 0.8, "verify": "exact", "n_grams": 5}
    with pytest.raises(ValueError, match=re.escape("verify must be one of exact | estimated | none, got 'bogus'")):
        NearDuplicateParams(verify="bogus")
