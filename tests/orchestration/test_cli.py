"""The `tokenlake` CLI over a real catalog."""

from __future__ import annotations

from conftest import SAMPLE_CRAWL, SAMPLE_KEYS, materialize_segments

from orchestration.cli import main


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
