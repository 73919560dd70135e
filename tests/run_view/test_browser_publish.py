"""A reviewer publishes the demo's run view candidate from the Dagster UI, in a real headless browser.

`make demo` (the same module) materialises the sample pipeline up to `run_view/candidate` and its blocking
checks in a temp TOKENLAKE_HOME / DAGSTER_HOME; `dagster dev` then serves that instance on 127.0.0.1, Debian's
Chromium (driven by Playwright) opens the Launchpad of `publish_run_view`, fills the config, clicks Launch Run
and waits for the run's end. The test checks the outcome through GraphQL and Iceberg and keeps a screenshot:
`$TOKENLAKE_ARTIFACTS/publish_run_view.png` when that variable is set (CI), else under the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from assets.run_view import store
from iceberg_catalog import TABLES, Lakehouse
from iceberg_catalog.run_view_contract import tag_name
from iceberg_catalog.schemas import RUN_VIEW_SAMPLES
from tests.conftest import skip_here_fail_in_ci
from tests.orchestration.dagster_server import dagster_server, graphql
from tests.run_view.browser import launch_from_launchpad, missing_browser

REPO = Path(__file__).resolve().parents[2]
REVIEWER = "alice-in-the-browser"
COMMENT = "mixture and checks reviewed on the candidate's materialisation"

RUN = """query($id: ID!) { runOrError(runId: $id) { __typename ... on Run {
  jobName status runConfigYaml tags { key value } } } }"""
OUTPUTS = """query($id: ID!) { logsForRun(runId: $id) { __typename ... on EventConnection { events { __typename
  ... on ExecutionStepOutputEvent { stepKey outputName metadataEntries { label ... on TextMetadataEntry { text } } }
} } } }"""


def run_demo(tokenlake_home: Path, dagster_home: Path, log: Path) -> None:
    """`make demo` into the given homes (a subprocess, as `make demo` runs it; it writes DAGSTER_HOME's
    dagster.yaml itself); fail with the log's tail."""
    env = {**os.environ, "TOKENLAKE_HOME": str(tokenlake_home), "DAGSTER_HOME": str(dagster_home)}
    env.pop("TOKENLAKE_CATALOG", None)
    with open(log, "w") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "orchestration.demo"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
    assert proc.returncode == 0, f"make demo failed ({proc.returncode}):\n{log.read_text()[-4000:]}"


def launchpad_yaml(config: dict) -> str:
    """The Launchpad text for publish_run_view; values JSON-quoted so a hash of digits stays a string."""
    lines = ["ops:", "  decide_run_view:", "    config:"]
    lines += [f"      {key}: {json.dumps(value)}" for key, value in config.items()]
    return "\n".join(lines) + "\n"


def keep_screenshots(folder: Path) -> None:
    """Copy publish_run_view*.png (the result, or the page where a step failed) to $TOKENLAKE_ARTIFACTS, which CI
    keeps; without that variable they stay in the test's tmp_path."""
    artifacts = os.environ.get("TOKENLAKE_ARTIFACTS")
    if not artifacts:
        return
    Path(artifacts).mkdir(parents=True, exist_ok=True)
    for png in folder.glob("publish_run_view*.png"):
        shutil.copyfile(png, Path(artifacts) / png.name)


def test_reviewer_publishes_the_demo_candidate_from_the_launchpad(tmp_path, tokenlake_home):
    skip_here_fail_in_ci(missing_browser())
    dagster_home = tmp_path / "dagster"
    run_demo(tokenlake_home, dagster_home, tmp_path / "demo.log")

    lakehouse = Lakehouse()
    candidates = [r for r in store.list_run_views(lakehouse) if r["status"] == "candidate"]
    assert len(candidates) == 1, candidates
    rv_id = candidates[0]["run_view_id"]
    before = store.load_manifest(lakehouse, rv_id)
    config = {
        "run_view_id": rv_id,
        "manifest_sha256": before["manifest_sha256"],
        "reviewer": REVIEWER,
        "decision": "approve",
        "comment": COMMENT,
    }

    server_dir = tmp_path / "server"
    server_dir.mkdir()
    png = tmp_path / "publish_run_view.png"
    # The server must serve the demo's instance: the gate reads the candidate's check results from it.
    with dagster_server(
        server_dir, "dagster dev", env_extra={"DAGSTER_HOME": str(dagster_home), "TOKENLAKE_HOME": str(tokenlake_home)}
    ) as port:
        try:
            run_id, status = launch_from_launchpad(port, "tokenlake", "publish_run_view", launchpad_yaml(config), png)
        finally:
            keep_screenshots(tmp_path)
        run = graphql(port, RUN, {"id": run_id})["runOrError"]
        events = graphql(port, OUTPUTS, {"id": run_id})["logsForRun"]["events"]

    # GraphQL: the run the browser launched carried exactly our config and succeeded with the decision.
    assert status == "SUCCESS", (run, (server_dir / "dagster dev.log").read_text()[-4000:])
    assert run["jobName"] == "publish_run_view" and run["status"] == "SUCCESS"
    assert {"key": "tokenlake/gate", "value": "run_view"} in run["tags"]
    assert yaml.safe_load(run["runConfigYaml"]) == {"ops": {"decide_run_view": {"config": config}}}
    outputs = [e for e in events if e["__typename"] == "ExecutionStepOutputEvent"]
    assert [(o["stepKey"], o["outputName"]) for o in outputs] == [("decide_run_view", "result")]
    meta = {m["label"]: m.get("text") for m in outputs[0]["metadataEntries"]}
    assert (meta["run_view_id"], meta["status"], meta["reviewer"]) == (rv_id, "published", REVIEWER)

    # Iceberg: the manifest row is published by that reviewer through that run; the frozen manifest is unchanged.
    lakehouse = Lakehouse()
    after = store.load_manifest(lakehouse, rv_id)
    assert (after["status"], after["reviewer"], after["decision_comment"]) == ("published", REVIEWER, COMMENT)
    assert after["decided_by_run_id"] == run_id and after["decided_at"] is not None
    assert (after["manifest_sha256"], after["manifest_json"]) == (before["manifest_sha256"], before["manifest_json"])
    # Every pinned input snapshot and the samples snapshot carry the view's tag, so the view stays readable.
    tag = tag_name(rv_id)
    pinned = {ident: sid for ident, sid in after["manifest"]["inputs"].items() if sid is not None}
    assert "tokenized.documents" in pinned
    for ident, sid in pinned.items():
        assert lakehouse.table(TABLES[ident]).snapshot_by_name(tag).snapshot_id == sid, ident
    samples_snap = lakehouse.table(RUN_VIEW_SAMPLES).snapshot_by_name(tag).snapshot_id
    assert store.read_samples(lakehouse, rv_id, samples_snap).num_rows == after["n_samples"] > 0

    # The screenshot shows the run page after the run ended (what a reviewer sees).
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
