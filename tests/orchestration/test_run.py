"""`tokenlake run --crawl-root DIR`: the demo's steps on any crawl directory, resumable."""

from __future__ import annotations

import re
import shutil

import pytest

from orchestration.cli import main as cli

from conftest import SAMPLE_CRAWL

pytestmark = pytest.mark.slow  # three pipeline runs (~90 s): `make test-slow`, which CI runs


def copy_segments(root, *keys: str):
    for key in keys:
        crawl, segment = key.split("/")
        src = SAMPLE_CRAWL / "crawl-data" / crawl / "segments" / segment
        shutil.copytree(src, root / "crawl-data" / crawl / "segments" / segment)


def runs(out: str) -> tuple[int, int]:
    ran, skipped = re.search(r"; (\d+) runs, (\d+) skipped", out).groups()
    return int(ran), int(skipped)


def test_run_twice_skips_everything_and_a_new_segment_reruns_only_what_depends_on_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOKENLAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    root = tmp_path / "my-crawl"
    copy_segments(root, "LEGACY-ARCHIVES/wget-2024", "CC-MAIN-2024-22/1715971057216.39")

    assert cli(["run", "--crawl-root", str(root)]) == 0
    first = capsys.readouterr().out
    assert runs(first)[1] == 0 and "2 partitions" in first
    assert "checks: checksums_verified passed" in first

    assert cli(["run", "--crawl-root", str(root)]) == 0
    second = capsys.readouterr().out
    assert runs(second) == (0, runs(first)[0]), "a second run on unchanged input must skip every run"

    copy_segments(root, "CC-MAIN-2020-34/1596439738015.38")
    assert cli(["run", "--crawl-root", str(root)]) == 0
    third = capsys.readouterr().out
    ran, skipped = runs(third)
    assert "3 partitions" in third and ran > 0 and skipped > 0
    assert re.search(r"raw_ingest LEGACY-ARCHIVES/wget-2024\s+skipped \(done, unchanged\)", third)
    assert re.search(r"raw_ingest CC-MAIN-2020-34/1596439738015.38\s+ok", third)
    assert re.search(r"curate_models\s+skipped", third)  # a source step does not depend on segments

    assert cli(["run", "--crawl-root", str(tmp_path / "nowhere")]) == 2
    assert "has no crawl-data/" in capsys.readouterr().err
