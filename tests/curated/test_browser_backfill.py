"""Backfill from the UI: a user opens `curated/documents` in the Dagster UI (headless Chromium through Playwright,
the recipe of tests/run_view/browser.py), picks every partition in the Materialize dialog, launches the backfill
and waits for it to succeed; the daemon of `dagster dev` runs one run per partition.

The lakehouse is prepared as a user would have it before: two crawl segments ingested (`raw_ingest`) and the
curation models built (`curate_models`), curated documents never materialised. The backfill's outcome is read
through GraphQL and Iceberg; a screenshot of the backfill page is kept (`$TOKENLAKE_ARTIFACTS/backfill.png` in
CI, else under the test's tmp_path).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from tests.conftest import skip_here_fail_in_ci
from tests.orchestration.dagster_server import dagster_server, wait_until_ended
from tests.run_view.browser import browser_page, missing_browser

pytestmark = pytest.mark.slow  # a dagster dev server, a browser and a backfill of two partitions: ~90 s

REPO = Path(__file__).resolve().parents[2]
SEGMENTS = ("CC-MAIN-2020-34/1596439738015.38", "CC-MAIN-2024-22/1715971057216.39")
BACKFILL = """query($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename
  ... on PartitionBackfill { status numPartitions partitionNames assetSelection { path } runs(limit: 20) {
    status creationTime startTime endTime } }
} }"""
RUNNING = {"REQUESTED", "CANCELING"}


def prepare(home: Path, crawl: Path) -> None:
    """Segments discovered by the sensor and ingested, models built: the state before curation."""
    from orchestration.definitions import build_defs
    from orchestration.demo import discover_segments, run_job
    from orchestration.instance import prepare_dagster_home

    for key in SEGMENTS:
        crawl_name, segment = key.split("/")
        where = Path(crawl_name) / "segments" / segment
        shutil.copytree(REPO / "data/sample_crawl/crawl-data" / where, crawl / "crawl-data" / where)
    prepare_dagster_home(home / "dagster")
    defs = build_defs(str(crawl))
    with dg.DagsterInstance.get() as instance:
        assert sorted(discover_segments(defs, instance)) == sorted(SEGMENTS)
        for key in SEGMENTS:
            run_job(defs, instance, "raw_ingest", key)
        run_job(defs, instance, "curate_models")


def backfill_from_asset_page(port: int, screenshot: Path) -> tuple[str, dict]:
    """Open curated/documents, Materialize… -> All partitions -> Launch backfill; wait until the backfill ends;
    screenshot its page; return (backfill id, its GraphQL record). On failure the page is kept as *-failed.png
    with the browser's console errors."""
    from playwright.sync_api import expect

    with browser_page(screenshot) as page:
        page.goto(f"http://127.0.0.1:{port}/assets/curated/documents")
        page.get_by_role("button", name="Materialize…").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("Launch runs to materialize curated / documents")
        dialog.get_by_role("button", name="All", exact=True).click()
        expect(dialog).to_contain_text(f"{len(SEGMENTS)} partitions")
        launch = dialog.get_by_role("button", name="Launch backfill")
        expect(launch).to_be_enabled()
        launch.click()
        toast = page.get_by_text(re.compile(r"Created backfill \w+"))
        expect(toast).to_be_visible()
        backfill_id = re.search(r"Created backfill (\w+)", toast.inner_text()).group(1)
        record = wait_until_ended(
            port, BACKFILL, {"id": backfill_id}, "partitionBackfillOrError", lambda status: status not in RUNNING
        )
        page.goto(f"http://127.0.0.1:{port}/runs/b/{backfill_id}")
        expect(page.get_by_text(backfill_id).first).to_be_visible()
        if record["status"] == "COMPLETED_SUCCESS":  # what the user sees on the backfill's page
            expect(page.get_by_text("Succeeded", exact=True).first).to_be_visible()
        page.screenshot(path=str(screenshot), full_page=True)
        return backfill_id, record


def test_backfill_of_curated_documents_over_all_partitions_from_the_asset_page(tmp_path, monkeypatch):
    skip_here_fail_in_ci(missing_browser())
    from assets.curated.pipeline import is_html
    from iceberg_catalog import Lakehouse
    from iceberg_catalog.schemas import CURATED_DOCUMENTS, RAW_WARC_RECORDS

    home, crawl = tmp_path / "tokenlake", tmp_path / "crawl"
    monkeypatch.setenv("TOKENLAKE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    prepare(home, crawl)
    assert Lakehouse().snapshot_id(CURATED_DOCUMENTS) is None

    server_dir, png = tmp_path / "server", tmp_path / "backfill.png"
    server_dir.mkdir()
    env = {"TOKENLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "TOKENLAKE_CRAWL_ROOT": str(crawl)}
    try:
        with dagster_server(server_dir, "dagster dev", env_extra=env) as port:
            backfill_id, record = backfill_from_asset_page(port, png)
    finally:
        artifacts = os.environ.get("TOKENLAKE_ARTIFACTS")
        for shot in tmp_path.glob("backfill*.png") if artifacts else ():
            Path(artifacts).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, Path(artifacts) / shot.name)

    log = (server_dir / "dagster dev.log").read_text()[-4000:]
    assert record["status"] == "COMPLETED_SUCCESS", (record, log)
    assert record["assetSelection"] == [{"path": ["curated", "documents"]}]
    assert sorted(record["partitionNames"]) == sorted(SEGMENTS) and record["numPartitions"] == len(SEGMENTS)
    assert [r["status"] for r in record["runs"]] == ["SUCCESS"] * len(SEGMENTS), record

    # Iceberg: every segment's HTML responses are now curated rows, each partition committed by a backfill run.
    lakehouse = Lakehouse()
    docs = lakehouse.scan(CURATED_DOCUMENTS, ("crawl", "segment", "record_id")).to_pylist()
    raw = lakehouse.scan(RAW_WARC_RECORDS, ("crawl", "segment", "record_id", "content_type")).to_pylist()
    html = {(r["crawl"], r["segment"], r["record_id"]) for r in raw if is_html(r["content_type"])}
    assert {(d["crawl"], d["segment"], d["record_id"]) for d in docs} == html
    assert {f"{d['crawl']}/{d['segment']}" for d in docs} == set(SEGMENTS)
    table = lakehouse.table(CURATED_DOCUMENTS)
    tags = [s.summary.additional_properties.get("tokenlake.partition-key") for s in table.snapshots()]
    assert set(SEGMENTS) <= set(tags)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
