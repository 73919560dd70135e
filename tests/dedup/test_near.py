"""dedup/near_duplicates as plan -> run -> commit (no Dagster), checked against the in-memory reference LSH."""

from __future__ import annotations

import dataclasses
import random
import re
import uuid
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
from pyiceberg.expressions import EqualTo

from assets.dedup import near, near_pairs, signatures
from assets.dedup.minhash import band_hashes, exact_jaccard, shingles
from assets.dedup.near_plan import NearDuplicateParams
from assets.dedup.signatures import SignatureParams
from iceberg_catalog import Provenance, config_hash
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_MINHASH_BANDS, DEDUP_NEAR_DUPLICATES
from resources.executor import InProcessExecutor
from tests.dedup.documents import two_crawls
from tests.dedup.reference import candidate_pairs, crawl_ordered_rows, signature

PROV = Provenance("dedup/near_duplicates", None, "test", "test", config_hash({}))


def hash_segments(
    lakehouse, params: SignatureParams = SignatureParams(), crawls: tuple[str, ...] = ("CRAWL-A", "CRAWL-B")
) -> None:
    snap = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    for crawl in crawls:
        tasks = signatures.plan(lakehouse, crawl, "s", snap, params, uuid.uuid4().hex)
        signatures.commit(
            lakehouse, crawl, "s", [signatures.run_task(t) for t in tasks], {t: PROV for t in signatures.TABLES}
        )


def near_duplicates(
    lakehouse, params: NearDuplicateParams = NearDuplicateParams(), executor=InProcessExecutor()
) -> tuple[dict, list[dict]]:
    plan = near.plan(lakehouse, params, uuid.uuid4().hex)
    result = near.execute(plan, executor)
    commit = near.commit(lakehouse, plan, result, PROV)
    assert commit.rows == result.stats["rows"]
    scratch = Path(urlparse(plan.scratch).path)
    assert not list(scratch.glob("*.parquet")), "the scratch files are deleted after the commit"
    return result.stats, rows_of(lakehouse)


def rows_of(lakehouse) -> list[dict]:
    return lakehouse.scan(DEDUP_NEAR_DUPLICATES).sort_by("doc_id").to_pylist()


class ShuffledExecutor:
    """Runs a stage's tasks in a shuffled order and returns the results shuffled too."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def map(self, fn, tasks, progress=None):
        order = list(tasks)
        self.random.shuffle(order)
        out = [fn(t) for t in order]
        self.random.shuffle(out)
        return out


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
    return sorted(crawl_ordered_rows(docs, pairs), key=lambda r: r["doc_id"])


@pytest.mark.parametrize("partitions", [1, 3, 8])
def test_near_duplicates_equal_the_reference_and_point_to_the_earlier_crawl(hashed, partitions):
    stats, rows = near_duplicates(hashed, NearDuplicateParams(partitions=partitions))
    assert rows == reference_rows(hashed)
    dups = [r for r in rows if r["decision"]]
    assert dups and {r["crawl"] for r in dups} == {"CRAWL-B"}
    assert {r["cluster_crawl"] for r in dups} == {"CRAWL-A"}
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


def test_any_partition_count_and_task_order_give_the_same_rows(hashed):
    _, one = near_duplicates(hashed, NearDuplicateParams(verify="estimated", partitions=1))
    # the last two: 8 band-hash ranges and 1 partition; 1 range and 5 partitions
    cuts = ({"partitions": 8}, {"partitions": 32}, {"docs_per_task": 7}, {"docs_per_partition": 11})
    for seed, cut in enumerate(cuts):
        params = NearDuplicateParams(verify="estimated", **cut)
        again = near.plan(hashed, params, uuid.uuid4().hex)
        expected = {"partitions": (1, cut.get("partitions")), "docs_per_task": (8, 1), "docs_per_partition": (1, 5)}
        assert (again.ranges, again.parts) == expected[next(iter(cut))]
        assert again.first is None  # nothing changed: the partition count is not part of the config
        again = dataclasses.replace(again, first="CRAWL-A")  # recompute everything anyway
        near.commit(hashed, again, near.execute(again, ShuffledExecutor(seed + 1)), PROV)
        assert rows_of(hashed) == one


def test_the_plan_reads_its_inputs_at_the_snapshots_it_pinned(hashed):
    plan = near.plan(hashed, NearDuplicateParams(), "pinned")
    assert {k: plan.snapshot_ids[k] for k in hashed.snapshot_ids(near.INPUTS)} == hashed.snapshot_ids(near.INPUTS)
    _, before = near_duplicates(hashed)
    hash_segments(hashed, SignatureParams(seed=2, bands=20, rows=2))  # every band hash changes
    assert near.plan(hashed, NearDuplicateParams(), "now").bands == 20
    near.commit(hashed, plan, near.execute(plan, InProcessExecutor()), PROV)
    assert rows_of(hashed) == before


def test_a_new_crawl_rewrites_only_its_own_rows(lakehouse):
    two_crawls(lakehouse)
    hash_segments(lakehouse, crawls=("CRAWL-A",))
    near_duplicates(lakehouse)
    files_a = data_files(lakehouse, "CRAWL-A")
    hash_segments(lakehouse, crawls=("CRAWL-B",))
    plan = near.plan(lakehouse, NearDuplicateParams(), "new crawl")
    assert plan.first == "CRAWL-B" and plan.recomputed() == ["CRAWL-B"]
    result = near.execute(plan, InProcessExecutor())
    earlier = next(s for s in result.stages if s.name == "scatter-earlier")  # CRAWL-A's rows through the filter
    assert earlier.tasks == len(data_files_of(lakehouse, DEDUP_MINHASH_BANDS, "CRAWL-A"))
    crawls = lakehouse.scan(DEDUP_MINHASH_BANDS, ["crawl"]).column(0).to_pylist()
    band_rows = {c: crawls.count(f"CRAWL-{c}") for c in "AB"}
    read, sent = result.stats["earlier_band_rows_read"], result.stats["earlier_band_rows_sent"]
    assert read == band_rows["A"] and 0 < sent < read  # only the rows that may pair with CRAWL-B's go on
    assert result.stats["band_rows_read"] == result.stats["band_rows_sent"] == band_rows["B"]
    near.commit(lakehouse, plan, result, PROV)
    stats, rows = result.stats, rows_of(lakehouse)
    assert rows == reference_rows(lakehouse) and stats["recomputed_crawls"] == ["CRAWL-B"]
    assert data_files(lakehouse, "CRAWL-A") == files_a  # earlier crawls' rows are not even rewritten
    unchanged = near.plan(lakehouse, NearDuplicateParams(), "same")
    assert unchanged.first is None and unchanged.recomputed() == []
    snapshot = lakehouse.snapshot_id(DEDUP_NEAR_DUPLICATES)
    stats, again = near_duplicates(lakehouse)
    assert again == rows and stats["rows"] == 0 and lakehouse.snapshot_id(DEDUP_NEAR_DUPLICATES) != snapshot
    hash_segments(lakehouse, SignatureParams(seed=2), crawls=("CRAWL-A",))  # an earlier crawl changes
    assert near.plan(lakehouse, NearDuplicateParams(), "changed").first == "CRAWL-A"


def data_files(lakehouse, crawl: str) -> set[str]:
    return data_files_of(lakehouse, DEDUP_NEAR_DUPLICATES, crawl)


def data_files_of(lakehouse, table, crawl: str) -> set[str]:
    scan = lakehouse.table(table).scan(row_filter=EqualTo("crawl", crawl))
    return {f.file.file_path for f in scan.plan_files()}


def test_band_count_from_file_statistics_equals_a_scan(hashed):
    snap = hashed.snapshot_id(DEDUP_MINHASH_BANDS)
    assert near.band_count(hashed, snap) == near.scanned_band_count(hashed, snap) == 14
    assert near.band_count(hashed, None) == near.scanned_band_count(hashed, None) == 0


def test_nothing_hashed_yet_gives_an_empty_table(lakehouse):
    stats, rows = near_duplicates(lakehouse)
    assert rows == [] and stats["documents"] == 0 and stats["bands"] == 0
    assert lakehouse.snapshot_id(DEDUP_NEAR_DUPLICATES) is not None


def test_band_hash_ranges_cut_the_signed_space_in_order():
    h = np.array([-(1 << 63), -(1 << 63) + (1 << 62) - 1, -1, 0, (1 << 62), (1 << 63) - 1], np.int64)
    assert near_pairs.range_of(h, 4).tolist() == [0, 0, 1, 2, 3, 3]
    assert near_pairs.range_of(h, 1).tolist() == [0] * 6
    assert near_pairs.range_of(h, 3).tolist() == sorted(near_pairs.range_of(h, 3).tolist())


def test_params():
    assert NearDuplicateParams().hashed() == {"threshold": 0.8, "verify": "exact", "n_grams": 5}
    assert NearDuplicateParams(partitions=8, docs_per_task=10).hashed() == NearDuplicateParams().hashed()
    with pytest.raises(ValueError, match=re.escape("verify must be one of exact | estimated | none, got 'bogus'")):
        NearDuplicateParams(verify="bogus")
