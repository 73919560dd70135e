"""The `tokenlake` CLI over a real catalog."""

from __future__ import annotations

import json

from orchestration.cli import main

from conftest import SAMPLE_CRAWL, SAMPLE_KEYS, materialize_segments


def test_tables_and_snapshots(tokenlake_home, instance, capsys):
    materialize_segments(instance, SAMPLE_CRAWL, SAMPLE_KEYS[1:2])
    assert main(["tables"]) == 0
    out = capsys.readouterr().out
    assert "raw.warc_records" in out and "quarantine.matches" in out
    assert main(["snapshots", "raw.warc_records", "-n", "1"]) == 0
    out = capsys.readouterr().out
    assert '"partition-key": "CC-MAIN-2024-22/1715971057216.39"' in out and '"asset-key": "raw/warc_records"' in out
    assert main(["snapshots", "raw.nope"]) == 2
    assert "unknown table 'raw.nope'" in capsys.readouterr().err


def test_digest_prints_every_table_and_the_run_view_samples_digest(lakehouse, capsys):
    from iceberg_catalog import TABLES
    from iceberg_catalog.digest import lakehouse_digest
    from tests.run_view import builders

    builders.write_documents(lakehouse, n_docs=12)
    builders.screen(lakehouse)
    view = builders.candidate(lakehouse, name="digest")
    assert main(["digest", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.endswith("}\n")  # exactly one JSON object on one line
    digest = json.loads(out)
    assert digest == lakehouse_digest(lakehouse) and set(TABLES) < set(digest)
    assert digest["run_view.samples_digest"] == [view.manifest["samples"]["sha256"]]
    assert digest["tokenized.documents"]["rows"] == 12 and digest["raw.warc_records"] == {"rows": 0, "sha256": "empty"}
    assert main(["digest"]) == 0
    out = capsys.readouterr().out
    assert digest["tokenized.documents"]["sha256"] in out and view.manifest["samples"]["sha256"] in out
