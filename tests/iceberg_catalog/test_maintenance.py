"""Physical erasure on a real embedded catalog: delete, remove refs, expire, sweep, then prove on disk."""

from __future__ import annotations

import hashlib
import lzma
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo
from tokenizers import Tokenizer

from assets.curated.models import REFERENCE_CORPUS
from iceberg_catalog import CatalogConfig, PartitionWriter, Provenance, config_hash, open_catalog
from iceberg_catalog.maintenance import (
    count_matching_in_retained_snapshots,
    delete_rows,
    drop_delete_manifests,
    erase_rows,
    expire_snapshots,
    find_bytes_in_files,
    referenced_files,
    remove_refs,
    sweep_orphan_files,
)
from iceberg_catalog.schemas import RAW_WARC_RECORDS, TOKENIZED_DOCUMENTS

from processes import spawned

REPO = Path(__file__).resolve().parents[2]
RAW = "raw.warc_records"
TOK = "tokenized.documents"
CRAWL = "CC-MAIN-2024-22"
NOW = datetime(2024, 5, 20, 12, 0, tzinfo=UTC)
DR = {"tokenlake.deletion-request-id": "DR-0001"}
# The victim's URL sorts first in its file, so its first 16 characters are the file's lower bound on
# target_uri: they sit in the Parquet footer and in every manifest that lists the file.
VICTIM_URI = "http://0-erasure-victim.example/about/me"
SECRET = "Jane Q. Erasable lives at 42 Rue des Oublies and her phone is +33 1 23 45 67 89."
BOUND = b"http://0-erasure"


def articles(n: int) -> list[tuple[str, str]]:
    """(title, first paragraphs) of the first `n` articles of the repo's Wikipedia excerpt."""
    raw = lzma.decompress(REFERENCE_CORPUS.read_bytes()).decode()
    docs = re.findall(r'<doc title="([^"]+)">\n(.*?)</doc>', raw, flags=re.S)
    return [(title, body[:1500]) for title, body in docs[:n]]


def deletion_key(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()


def warc_rows(segment: str, docs: list[tuple[str, str]], victim: int | None = None) -> pa.Table:
    rows = []
    for i, (title, text) in enumerate(docs):
        uri = VICTIM_URI if i == victim else f"https://en.wikipedia.org/wiki/{title.replace(' ', '_')}"
        body = f"<html><head><title>{title}</title></head><body><p>{text}</p>"
        body += f"<p>{SECRET}</p></body></html>" if i == victim else "</body></html>"
        payload = body.encode()
        rows.append(
            {
                "record_id": f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{segment}/{i}')}>",
                "deletion_key": deletion_key(uri),
                "crawl": CRAWL,
                "segment": segment,
                "target_uri": uri,
                "host": uri.split("/")[2],
                "warc_date": NOW,
                "http_status": 200,
                "content_type": "text/html; charset=utf-8",
                "payload": payload,
                "payload_length": len(payload),
                "payload_sha1": "sha1:" + hashlib.sha1(payload).hexdigest().upper(),
                "payload_digest_declared": None,
                "payload_digest_verified": None,
                "warc_file": f"crawl-data/{CRAWL}/segments/{segment}/warc/x.warc.gz",
                "warc_offset": 1000 * i,
                "warc_length": 900,
                "warc_version": "WARC/1.1",
                "licence_basis": "cc-terms",
                "ingested_at": NOW,
            }
        )
    return pa.Table.from_pylist(rows, schema=RAW_WARC_RECORDS.arrow_schema)


def prov(key: str) -> Provenance:
    return Provenance("raw/warc_records", key, f"run-{key}", "raw-1", config_hash({}))


def write(catalog, ident: str, partition: dict, data: pa.Table, row_group_rows: int = 4):
    w = PartitionWriter(catalog, ident, partition, row_group_rows=row_group_rows)
    w.write(data)
    return w.commit(prov("/".join(partition.values())))


def data_files(table, snapshot_id=None) -> set[str]:
    return {t.file.file_path for t in table.scan(snapshot_id=snapshot_id).plan_files()}


def local(path: str) -> Path:
    return Path(path.removeprefix("file://"))


def sorted_rows(table) -> pa.Table:
    return table.scan().to_arrow().sort_by("record_id")


def test_erasure_leaves_the_value_in_no_snapshot_and_no_file(tokenlake_home):
    catalog = open_catalog()
    docs = articles(18)
    write(catalog, RAW, {"crawl": CRAWL, "segment": "s1"}, warc_rows("s1", docs[:11], victim=5))
    write(catalog, RAW, {"crawl": CRAWL, "segment": "s2"}, warc_rows("s2", docs[11:]))
    table = catalog.load_table(RAW)
    tagged = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(tagged, "runview-rv1").commit()
    victim = EqualTo("deletion_key", deletion_key(VICTIM_URI))
    before = sorted_rows(table)
    warehouse = tokenlake_home / "warehouse"
    needles = [SECRET.encode(), BOUND]

    # the search can fail: before erasure it finds the secret (only by decoding Parquet: pages are
    # compressed) and the URL bound (raw, in the Parquet footer; decoded, in the gzip'd Avro manifests)
    raw_hits = find_bytes_in_files(warehouse, needles, decode=False)
    hits = find_bytes_in_files(warehouse, needles)
    assert not [p for p, n in raw_hits if n == SECRET.encode()]
    assert [p for p, n in raw_hits if n == BOUND and p.endswith(".parquet")]
    assert [p for p, n in hits if n == SECRET.encode() and p.endswith(".parquet")]
    assert [p for p, n in hits if n == BOUND and p.endswith(".avro")]

    # 1. delete without removing the tag: current reads lose the row, the tag still reads it from its files
    tagged_files = data_files(table, tagged)
    first = erase_rows(table, victim, DR)
    assert first.rows_deleted == 1 and first.snapshots_expired and first.files_removed
    assert not first.erased and first.matching_rows_by_snapshot[tagged] == 1
    assert first.blocking_refs == {"runview-rv1": 1}
    assert all(local(p).exists() for p in tagged_files)
    assert [p for p, n in find_bytes_in_files(warehouse, needles) if n == SECRET.encode()]
    after = sorted_rows(table)
    assert after.num_rows == before.num_rows - 1
    assert after.equals(before.filter(pc.not_equal(before["deletion_key"], deletion_key(VICTIM_URI))))
    summaries = [s.summary.additional_properties for s in table.snapshots()]
    assert any(p.get("tokenlake.deletion-request-id") == "DR-0001" for p in summaries)

    # the rewritten file keeps the writer's row-group boundaries (4, 4, 3 minus the victim's group's row)
    s1_files = [p for p in data_files(table) if "segment=s1" in p]
    assert len(s1_files) == 1
    meta = pq.read_metadata(local(s1_files[0]))
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [4, 3, 3]

    # 2. remove the superseded view's tag: now nothing retained reads the row and no file holds it
    second = erase_rows(table, victim, DR, refs=["runview-rv1"])
    assert second.rows_deleted == 0 and second.refs_removed == ("runview-rv1",)
    assert tagged in second.snapshots_expired
    assert (
        second.erased
        and second.blocking_refs == {}
        and set(second.matching_rows_by_snapshot) == {s.snapshot_id for s in table.snapshots()}
    )
    assert find_bytes_in_files(warehouse, needles) == []
    assert not any(local(p).exists() for p in tagged_files - data_files(table))
    assert sorted_rows(table).equals(after)
    assert all(local(p).exists() for p in referenced_files(table))
    reopened = open_catalog().load_table(RAW)
    assert sorted_rows(reopened).equals(after)

    # 3. a second run changes nothing
    snapshots, location = [s.snapshot_id for s in table.snapshots()], table.metadata_location
    third = erase_rows(table, victim, DR, refs=["runview-rv1"])
    assert (
        third.rows_deleted,
        third.cleanup_snapshot_id,
        third.refs_removed,
        third.snapshots_expired,
        third.files_removed,
    ) == (0, None, (), (), ())
    assert third.erased
    table.refresh()
    assert [s.snapshot_id for s in table.snapshots()] == snapshots and table.metadata_location == location
    assert third.as_metadata()["erased"] is True


def test_tokens_removed_by_rematerialising_a_partition_are_gone_from_disk(tokenlake_home):
    """The lead's other path: a packed table is re-materialised without the document, then maintained."""
    catalog = open_catalog()
    tok = Tokenizer.from_file(str(REPO / "data" / "tokenizers" / "gpt2_tokenizer.json"))
    docs = articles(9)
    texts = [text for _, text in docs]
    ids = [enc.ids + [50256] for enc in tok.encode_batch(texts)]
    tid = hashlib.sha256(b"gpt2").hexdigest()

    def rows(keep: list[int]) -> pa.Table:
        out = []
        for i in keep:
            blob = np.asarray(ids[i], dtype="<u2").tobytes()
            out.append(
                {
                    "tokenizer_id": tid,
                    "doc_id": f"{i:032x}",
                    "record_id": f"<urn:uuid:{uuid.UUID(int=i)}>",
                    "deletion_key": deletion_key(docs[i][0]),
                    "crawl": CRAWL,
                    "segment": "s1",
                    "tokens": blob,
                    "token_dtype": "uint16",
                    "n_tokens": len(ids[i]),
                    "tokens_sha256": hashlib.sha256(blob).hexdigest(),
                    "language": "en",
                    "ppl_bucket": "middle",
                    "host": "en.wikipedia.org",
                    "domain_class": "org",
                }
            )
        return pa.Table.from_pylist(out, schema=TOKENIZED_DOCUMENTS.arrow_schema)

    part = {"tokenizer_id": tid, "crawl": CRAWL, "segment": "s1"}
    write(catalog, TOK, part, rows(list(range(9))))
    victim_tokens = np.asarray(ids[4][100:140], dtype="<u2").tobytes()  # 40 tokens from the middle: not UTF-8 text
    warehouse = tokenlake_home / "warehouse"
    assert [p for p, _ in find_bytes_in_files(warehouse, [victim_tokens]) if p.endswith(".parquet")]

    write(catalog, TOK, part, rows([i for i in range(9) if i != 4]))
    table = catalog.load_table(TOK)
    victim = EqualTo("doc_id", f"{4:032x}")
    report = erase_rows(table, victim, DR)
    assert report.rows_deleted == 0 and report.files_removed and report.erased
    assert find_bytes_in_files(warehouse, [victim_tokens]) == []
    assert table.scan().to_arrow().num_rows == 8


@pytest.mark.parametrize("warehouse", ["file-uri", "plain-path"])
def test_a_file_of_an_uncommitted_writer_is_swept_and_referenced_files_are_not(tokenlake_home, warehouse):
    if warehouse == "plain-path":
        tokenlake_home.mkdir(parents=True)
        catalog = open_catalog(
            CatalogConfig(
                "plain",
                {"type": "sql", "uri": f"sqlite:///{tokenlake_home}/c.db", "warehouse": str(tokenlake_home / "wh")},
            )
        )
        assert catalog.load_table(RAW).location().startswith("/")
    else:
        catalog = open_catalog()
    docs = articles(6)
    write(catalog, RAW, {"crawl": CRAWL, "segment": "s1"}, warc_rows("s1", docs[:3]))
    # a run that wrote a complete data file and then failed before committing
    failed = PartitionWriter(catalog, RAW, {"crawl": CRAWL, "segment": "s2"}, target_file_bytes=1)
    failed.write(warc_rows("s2", docs[3:]))
    orphan = failed.paths[0]
    assert local(orphan).exists()
    table = catalog.load_table(RAW)
    before = sorted_rows(table)

    # never committed and young: it may be a running writer's, so the default grace keeps it
    assert sweep_orphan_files(table) == [] and local(orphan).exists()
    assert sweep_orphan_files(table, dry_run=True, uncommitted_min_age_seconds=0) == [orphan] and local(orphan).exists()
    assert sweep_orphan_files(table, uncommitted_min_age_seconds=0) == [orphan] and not local(orphan).exists()
    assert sweep_orphan_files(table, uncommitted_min_age_seconds=0) == []
    assert all(local(p).exists() for p in referenced_files(table))
    assert sorted_rows(table).equals(before)


def test_building_blocks_are_no_ops_when_nothing_matches_and_refuse_bad_input(tokenlake_home):
    catalog = open_catalog()
    for _ in range(2):  # a re-materialisation: the table now has history to expire
        write(catalog, RAW, {"crawl": CRAWL, "segment": "s1"}, warc_rows("s1", articles(3)))
    table = catalog.load_table(RAW)
    snap = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(snap, "runview-a").create_branch(snap, "audit").commit()
    history = {s.snapshot_id for s in table.snapshots()}
    assert len(history) >= 2

    assert delete_rows(table, "deletion_key == 'nobody'", DR) == 0
    assert table.current_snapshot().snapshot_id == snap and {s.snapshot_id for s in table.snapshots()} == history
    counts = count_matching_in_retained_snapshots(table, "http_status == 200")
    assert set(counts) == history and counts[snap] == 3
    assert expire_snapshots(table) == sorted(history - {snap}) and expire_snapshots(table) == []
    assert count_matching_in_retained_snapshots(table, "http_status == 200") == {snap: 3}
    assert remove_refs(table, ["runview-a", "audit", "never-existed"]) == ["audit", "runview-a"]
    assert set(table.refs()) == {"main"}
    assert delete_rows(table, "segment == 's1'", DR) == 3  # every row of the file: dropped, not rewritten
    assert table.scan().to_arrow().num_rows == 0 and data_files(table) == set()
    with pytest.raises(ValueError, match="'main'"):
        remove_refs(table, ["main"])
    with pytest.raises(ValueError, match="keep_last"):
        expire_snapshots(table, keep_last=0)
    with pytest.raises(ValueError, match="snapshot properties"):
        delete_rows(table, "http_status == 200", {"tokenlake.deletion-request-id": 7})
    with pytest.raises(ValueError, match="needles"):
        find_bytes_in_files(tokenlake_home, [""])


def test_a_delete_snapshot_keeps_the_removed_files_bounds_until_its_delete_manifests_are_dropped(tokenlake_home):
    catalog = open_catalog()
    write(catalog, RAW, {"crawl": CRAWL, "segment": "s1"}, warc_rows("s1", articles(5), victim=0))
    table = catalog.load_table(RAW)
    old_files = data_files(table)
    victim = EqualTo("deletion_key", deletion_key(VICTIM_URI))
    warehouse = tokenlake_home / "warehouse"

    assert delete_rows(table, victim, DR) == 1
    expire_snapshots(table)
    swept = sweep_orphan_files(table)
    # the current (overwrite) snapshot lists the old file only as DELETED: it is not read, so it is swept
    assert set(old_files) <= set(swept) and not any(local(p).exists() for p in old_files)
    assert count_matching_in_retained_snapshots(table, victim) == {table.current_snapshot().snapshot_id: 0}
    # ...but that DELETED entry still carries the old file's lower bound on target_uri
    assert [p for p, _ in find_bytes_in_files(warehouse, [BOUND])] and all(
        p.endswith(".avro") for p, _ in find_bytes_in_files(warehouse, [BOUND])
    )

    rows = sorted_rows(table)
    assert drop_delete_manifests(table, DR) == table.current_snapshot().snapshot_id
    assert drop_delete_manifests(table, DR) is None
    expire_snapshots(table)
    sweep_orphan_files(table)
    assert find_bytes_in_files(warehouse, [BOUND]) == []
    assert sorted_rows(table).equals(rows) and rows.num_rows == 4


def _writer_process(home: str, n: int) -> None:
    config = CatalogConfig.embedded(home)
    catalog = open_catalog(config)
    docs = articles(4)
    for i in range(n):
        w = PartitionWriter(
            catalog, RAW, {"crawl": CRAWL, "segment": f"w{i}"}, catalog_fingerprint=config.fingerprint()
        )
        w.write(warc_rows(f"w{i}", docs))
        w.commit(prov(f"{CRAWL}/w{i}"))


def test_maintenance_running_beside_a_committing_writer_loses_nothing(tokenlake_home):
    config = CatalogConfig.embedded(tokenlake_home)
    catalog = open_catalog(config)
    write(catalog, RAW, {"crawl": CRAWL, "segment": "s1"}, warc_rows("s1", articles(6), victim=2))
    table = catalog.load_table(RAW)
    victim = EqualTo("deletion_key", deletion_key(VICTIM_URI))
    n = 6
    with spawned(_writer_process, [(str(tokenlake_home), n)]) as (writer,):
        reports = []
        while writer.is_alive() or not reports:
            reports.append(erase_rows(table, victim, DR, catalog_fingerprint=config.fingerprint()))
    assert writer.exitcode == 0
    final = erase_rows(table, victim, DR, catalog_fingerprint=config.fingerprint())
    assert sum(r.rows_deleted for r in reports) == 1 and final.erased
    segments = pc.value_counts(table.scan(selected_fields=("segment",)).to_arrow()["segment"]).to_pylist()
    assert {d["values"]: d["counts"] for d in segments} == {"s1": 5, **{f"w{i}": 4 for i in range(n)}}
    assert all(local(p).exists() for p in referenced_files(table))
