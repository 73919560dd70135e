"""End to end on the sample crawl: the `make demo` pipeline, a run view approved by a named reviewer, the
provenance of one of its documents (WARC file and offset, training steps), then deletion of its URL through
the CLI: 0 matching rows in every table at every retained snapshot, its payload bytes in no file on disk,
the view superseded, a rebuilt candidate, unrelated documents untouched."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from pyiceberg.expressions import In

import loader
from assets.governance.provenance import provenance
from assets.run_view import store
from iceberg_catalog import TABLES, Lakehouse
from iceberg_catalog.digest import comparable, rows_digest, table_digest
from iceberg_catalog.maintenance import count_matching_in_retained_snapshots, find_bytes_in_files
from iceberg_catalog.schemas import CURATED_DOCUMENTS, RAW_WARC_RECORDS
from orchestration.cli import main as cli
from resources import IcebergCatalogResource

G = 4  # global batch size for the provenance steps and the loader run


# the whole demo, other engines reading it, then approval, provenance, deletion (~60 s): `make test-slow` (CI)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_lakehouse(tmp_path_factory):
    """The demo pipeline on the sample crawl, once for this module, in its own TOKENLAKE_HOME/DAGSTER_HOME."""
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("e2e")
    mp.setenv("TOKENLAKE_HOME", str(home / "tokenlake"))
    mp.setenv("DAGSTER_HOME", str(home / "dagster"))
    mp.delenv("TOKENLAKE_CATALOG", raising=False)
    mp.delenv("TOKENLAKE_CRAWL_ROOT", raising=False)
    from orchestration.demo import main

    assert main() == 0
    yield home / "tokenlake"
    mp.undo()


def duckdb_with_iceberg():
    """DuckDB with the iceberg and avro extensions loaded by path from their PyPI wheels (no download)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect(
        config={
            "allow_unsigned_extensions": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    for module, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
        (path,) = Path(module.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension")
        con.execute(f"LOAD '{path}'")
    return con


def test_duckdb_and_polars_read_every_table_as_pyiceberg_does(demo_lakehouse, monkeypatch):
    """Any Iceberg engine reads the lakehouse: DuckDB's iceberg_scan and polars' scan_iceberg give every
    table's rows with the same count and content digest as pyiceberg (columns cast to the declared schema)."""
    import polars as pl

    monkeypatch.setenv("TOKENLAKE_HOME", str(demo_lakehouse))
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
    lakehouse, con, compared = Lakehouse(), duckdb_with_iceberg(), {}
    for ident, tdef in sorted(TABLES.items()):
        table = lakehouse.table(tdef)
        if table.current_snapshot() is None:
            continue
        expected = table_digest(lakehouse, tdef)
        by_duckdb = con.execute("SELECT * FROM iceberg_scan(?)", [table.metadata_location]).arrow()
        by_polars = pl.scan_iceberg(table).collect().to_arrow()
        for engine, data in (("duckdb", by_duckdb), ("polars", by_polars)):
            data = data.read_all() if hasattr(data, "read_all") else data
            data = data.select(tdef.arrow_schema.names).cast(tdef.arrow_schema)
            got = {"rows": data.num_rows, "sha256": rows_digest(comparable(data))}
            assert got == expected, (engine, ident)
        compared[ident] = expected["rows"]
    assert len(compared) >= 14 and compared["raw.warc_records"] == 357, compared


def lineage_counts(lakehouse, keys: dict[str, set]) -> dict[str, int]:
    """Rows matching any lineage key, summed over every retained snapshot, per table that has such a column."""
    out = {}
    for ident, tdef in TABLES.items():
        names = {f.name for f in tdef.schema.fields}
        table = lakehouse.table(tdef)
        for column, values in keys.items():
            if column in names and values and table.current_snapshot() is not None:
                counts = count_matching_in_retained_snapshots(table, In(column, sorted(values)))
                out[f"{ident}.{column}"] = sum(counts.values())
    return out


def test_provenance_then_deletion_of_a_url_in_a_published_view(demo_lakehouse, capsys):
    lakehouse = Lakehouse()
    [candidate] = store.list_run_views(lakehouse)
    rv_id = candidate["run_view_id"]
    assert cli(["runview", "approve", rv_id, "--sha256", candidate["manifest_sha256"], "--reviewer", "grace"]) == 0
    samples = store.read_samples(lakehouse, rv_id)

    # --- provenance of a document in the published view
    # the view's smallest document: its deletion leaves the successor's mixture within the share tolerance (a
    # large one can make a 70/30 mixture of a few dozen documents infeasible, and the successor's check fail)
    doc_id = min(zip(samples["n_tokens"].to_pylist(), samples["doc_id"].to_pylist()))[1]
    [prov] = provenance(lakehouse, doc_id=doc_id, global_batch_size=G, epochs=(0,))
    raw = prov["raw_record"]
    assert raw["warc_file"].endswith(".warc.gz") and raw["warc_offset"] >= 0 and raw["licence_basis"]
    path = raw["warc_file"].removeprefix("file://")
    with open(path, "rb") as fh:  # the named offset really is that record's gzip member
        fh.seek(raw["warc_offset"])
        member = gzip.decompress(fh.read(raw["warc_length"]))
    assert f"WARC-Record-ID: {raw['record_id']}".encode() in member
    assert prov["curated"]["kept"] and prov["tokens"][0]["n_tokens"] > 0
    [view] = prov["run_views"]
    assert view["status"] == "published" and view["reviewer"] == "grace"
    served = {s["step"] for s in view["served_at"]}
    view_obj = loader.open_run_view(rv_id, catalog=lakehouse)
    actually = {
        batch["step"]
        for batch in loader.RunViewLoader(view_obj, G, epochs=1)
        if any(d == doc_id for seq in batch["documents"] for d, _, _ in seq)
    }
    assert served == actually and served
    assert cli(["provenance", "--doc-id", doc_id, "--global-batch-size", str(G)]) == 0
    printed = capsys.readouterr().out
    assert (
        raw["warc_file"] in printed and f'"warc_offset": {raw["warc_offset"]}' in printed and '"served_at"' in printed
    )

    # --- delete that document's URL
    url = prov["curated"]["url"]
    dkey = lakehouse.scan(CURATED_DOCUMENTS, ("deletion_key",), In("doc_id", [doc_id]))["deletion_key"][0].as_py()
    victims = lakehouse.scan(RAW_WARC_RECORDS, ("record_id", "deletion_key", "payload"), In("deletion_key", [dkey]))
    keys = {
        "record_id": set(victims["record_id"].to_pylist()),
        "deletion_key": set(victims["deletion_key"].to_pylist()),
        "doc_id": {doc_id},
    }
    payload = victims["payload"][0].as_py()
    needle = _unique_slice(lakehouse, payload, exclude=keys["record_id"])
    warehouse = str(demo_lakehouse)
    assert find_bytes_in_files(warehouse, [needle])  # found before: the search can see it
    before = lineage_counts(lakehouse, keys)
    assert before["raw.warc_records.record_id"] > 0 and before["tokenized.documents.doc_id"] > 0
    others = {
        ident: _rows_not_matching(lakehouse, ident, keys)
        for ident in ("raw.warc_records", "curated.documents", "tokenized.documents", "dedup.minhash_bands")
    }

    assert cli(["delete", "url", url, "--reason", "takedown", "--requested-by", "legal", "--now"]) == 0
    out = capsys.readouterr().out
    assert "erased: True" in out and rv_id in out

    after = lineage_counts(lakehouse, keys)
    assert after and all(n == 0 for n in after.values()), after
    assert find_bytes_in_files(warehouse, [needle]) == []
    assert {ident: _rows_not_matching(lakehouse, ident, keys) for ident in others} == others
    row = store.load_manifest(lakehouse, rv_id)
    assert row["status"] == "superseded" and row["superseded_by_request"]
    with pytest.raises(loader.RunViewSuperseded):
        loader.open_run_view(rv_id, catalog=lakehouse)

    # the sensor builds the successor candidate; it waits for a reviewer
    from orchestration.definitions import defs

    with dg.DagsterInstance.get() as instance:
        sensor = defs.resolve_sensor_def("superseded_run_views")
        with dg.build_sensor_context(instance=instance, resources={"catalog": IcebergCatalogResource()}) as ctx:
            [req] = sensor(ctx)
        res = defs.resolve_job_def("run_view_candidate").execute_in_process(
            instance=instance, run_config=req.run_config
        )
    assert res.success
    successor = [r for r in store.list_run_views(lakehouse) if r["supersedes"] == rv_id]
    assert len(successor) == 1 and successor[0]["status"] == "candidate"
    assert doc_id not in store.read_samples(lakehouse, successor[0]["run_view_id"])["doc_id"].to_pylist()
    assert cli(["deletions"]) == 0 and "completed" in capsys.readouterr().out


def _rows_not_matching(lakehouse, ident: str, keys: dict[str, set]) -> Counter:
    t = lakehouse.scan(TABLES[ident])
    cols = [c for c in keys if c in t.column_names]
    return Counter(
        tuple(r[c] for c in cols) for r in t.select(cols).to_pylist() if not any(r[c] in keys[c] for c in cols)
    )


def _unique_slice(lakehouse, payload: bytes, exclude: set[str], width: int = 48) -> bytes:
    """A slice of `payload` that no other raw record contains (so its absence afterwards means erasure)."""
    raw = lakehouse.scan(RAW_WARC_RECORDS, ("record_id", "payload"))
    others = [p for r, p in zip(raw["record_id"].to_pylist(), raw["payload"].to_pylist()) if r not in exclude]
    for start in range(len(payload) // 2, len(payload) - width, 97):
        candidate = payload[start : start + width]
        if not any(candidate in p for p in others):
            return candidate
    raise AssertionError("no unique slice in the payload")
