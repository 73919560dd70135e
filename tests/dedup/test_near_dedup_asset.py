"""dedup/* assets on real pages and a real near-duplicate re-crawl, through Dagster into a real catalog."""

from __future__ import annotations

import io
import uuid

from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_MINHASH_BANDS, DEDUP_NEAR_DUPLICATES

from conftest import SAMPLE_CRAWL, materialize_assets, materialize_segments

WGET = sorted(SAMPLE_CRAWL.rglob("wget-2024/warc/*.warc.gz"))


def recrawl(path, edit) -> bytes:
    """The same captures fetched again later: new record ids, payloads passed through `edit`."""
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    with open(path, "rb") as fh:
        for rec in ArchiveIterator(fh):
            if rec.rec_type != "response":
                continue
            body = edit(rec.content_stream().read())
            http = rec.http_headers
            http.replace_header("Content-Length", str(len(body)))
            http.remove_header("Content-Encoding")
            http.remove_header("Transfer-Encoding")
            new = writer.create_warc_record(
                rec.rec_headers.get_header("WARC-Target-URI"),
                "response",
                payload=io.BytesIO(body),
                http_headers=http,
                warc_headers_dict={"WARC-Record-ID": f"<urn:uuid:{uuid.uuid4()}>", "WARC-Date": "2025-01-01T00:00:00Z"},
            )
            writer.write_record(new)
    return out.getvalue()


def light_edit(body: bytes) -> bytes:
    """A few words changed: near-duplicate, not exact."""
    return body.replace(b" the ", b" this ", 2).replace(b" and ", b" & ", 1)


def build(instance, root, keys, lm, minhash_config=None):
    materialize_segments(instance, root, keys)
    materialize_segments(instance, root, keys, selection="curated/documents", lm_path=lm)
    materialize_segments(
        instance,
        root,
        keys,
        selection="dedup/minhash_bands",
        run_config={"ops": {"dedup_minhash": {"config": minhash_config}}} if minhash_config else None,
    )


def near_table():
    return Lakehouse().scan(DEDUP_NEAR_DUPLICATES).sort_by("doc_id").to_pylist()


def bands_table():
    return Lakehouse().scan(DEDUP_MINHASH_BANDS).sort_by([("doc_id", "ascending"), ("band", "ascending")])


def test_recrawled_near_duplicates_point_to_the_earlier_crawl(tokenlake_home, instance, crawl_root, reference_lm_file):
    root = crawl_root(
        {"CRAWL-2024/s": {"a.warc.gz": WGET[0]}, "CRAWL-2025/s": {"b.warc.gz": recrawl(WGET[0], light_edit)}}
    )
    build(instance, root, ["CRAWL-2024/s", "CRAWL-2025/s"], reference_lm_file)
    materialize_assets(instance, "dedup/near_duplicates")
    rows = near_table()
    dups = [r for r in rows if r["decision"] == "near_duplicate"]
    canon = [r for r in rows if r["decision"] is None]
    docs = Lakehouse().scan(CURATED_DOCUMENTS, ("doc_id", "crawl", "kept", "text_sha256"))
    kept_2024 = [
        d
        for d, c, k in zip(docs["doc_id"].to_pylist(), docs["crawl"].to_pylist(), docs["kept"].to_pylist())
        if k and c == "CRAWL-2024"
    ]
    assert kept_2024 and dups
    # the 2024 pages were alone in their crawl: rows are written crawl by crawl, so they have none
    assert {r["crawl"] for r in dups} == {"CRAWL-2025"} and canon == []
    assert {r["cluster_crawl"] for r in dups} == {"CRAWL-2024"}
    assert {r["duplicate_of"] for r in dups} <= set(kept_2024)
    assert all(r["cluster_size"] >= 2 and r["cluster_id"] == (r["duplicate_of"] or r["doc_id"]) for r in rows)
    # the edited copies really are different texts (not exact duplicates)
    hashes = dict(zip(docs["doc_id"].to_pylist(), docs["text_sha256"].to_pylist()))
    assert sum(hashes[r["doc_id"]] != hashes[r["duplicate_of"]] for r in dups) >= len(dups) // 2
    snap = Lakehouse().table(DEDUP_NEAR_DUPLICATES).current_snapshot()
    prov = Provenance.from_snapshot_summary(snap.summary.additional_properties)
    assert "dedup.minhash_bands" in prov["upstream-snapshot-ids"]
    # the cheaper verification modes: no verification can only add duplicates
    exact_dups = {r["doc_id"] for r in dups}
    for verify in ("estimated", "none"):
        materialize_assets(
            instance,
            "dedup/near_duplicates",
            run_config={"ops": {"dedup__near_duplicates": {"config": {"verify": verify}}}},
        )
        found = {r["doc_id"] for r in near_table() if r["decision"]}
        assert found and (verify != "none" or found >= exact_dups)


def test_materialisation_order_and_workers_do_not_change_clusters(
    tokenlake_home, instance, crawl_root, reference_lm_file
):
    root = crawl_root(
        {
            "CRAWL-2024/s": {"a.warc.gz": WGET[0]},
            "CRAWL-2025/s": {"b.warc.gz": recrawl(WGET[0], light_edit)},
            "CRAWL-2023/s": {"c.warc.gz": WGET[1]},
        }
    )
    # newest first, one worker
    build(instance, root, ["CRAWL-2025/s", "CRAWL-2024/s", "CRAWL-2023/s"], reference_lm_file)
    materialize_assets(instance, "dedup/near_duplicates")
    first = near_table()
    bands_first = bands_table()
    # again, oldest first, two workers hashing
    materialize_segments(
        instance,
        root,
        ["CRAWL-2023/s", "CRAWL-2024/s", "CRAWL-2025/s"],
        selection="dedup/minhash_bands",
        run_config={"ops": {"dedup_minhash": {"config": {"workers": 2, "batch_docs": 7}}}},
    )
    materialize_assets(instance, "dedup/near_duplicates")
    assert near_table() == first
    assert bands_table().equals(bands_first)


def test_adding_a_later_crawl_keeps_earlier_decisions(tokenlake_home, instance, crawl_root, reference_lm_file):
    root = crawl_root({"CRAWL-2024/s": {"a.warc.gz": WGET[0], "a2.warc.gz": recrawl(WGET[0], light_edit)}})
    build(instance, root, ["CRAWL-2024/s"], reference_lm_file)
    materialize_assets(instance, "dedup/near_duplicates")
    before = {r["doc_id"]: (r["decision"], r["cluster_id"]) for r in near_table()}
    assert any(d == "near_duplicate" for d, _ in before.values())
    later = crawl_root({"CRAWL-2025/s": {"b.warc.gz": recrawl(WGET[0], lambda b: light_edit(light_edit(b)))}})
    build(instance, later, ["CRAWL-2025/s"], reference_lm_file)
    materialize_assets(instance, "dedup/near_duplicates")
    after = {r["doc_id"]: (r["decision"], r["cluster_id"]) for r in near_table()}
    assert {k: v for k, v in after.items() if k in before} == before  # earlier canonicals stay canonical
    new = {k: v for k, v in after.items() if k not in before}
    assert new and all(d == "near_duplicate" for d, _ in new.values())
