"""What a backfill from the UI costs: curated/documents over two crawl segments as a backfill of `dagster dev`
(GraphQL's launchPartitionBackfill, the mutation the Materialize dialog sends; the daemon launches one run
process per partition) against the same partitions run in-process with `orchestration.demo.run_job`, the way
`make demo` runs them. Both start from the same prepared state (`tests/curated/test_browser_backfill.prepare`:
segments ingested, curation models built) in their own temp TOKENLAKE_HOME, and must curate the same records.

The backfill is timed from the mutation until the backfill ends; the server's start is not counted. The
test of the UI path (tests/curated/test_browser_backfill.py) asserts only on outcomes; the time is here.

    python bench/backfill.py [--json]

With --json, exactly one JSON object on its own line on stdout (everything else on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from iceberg_catalog import Lakehouse  # noqa: E402
from iceberg_catalog.schemas import CURATED_DOCUMENTS  # noqa: E402
from orchestration.definitions import build_defs  # noqa: E402
from orchestration.demo import run_job  # noqa: E402
from tests.curated.test_browser_backfill import BACKFILL, RUNNING, SEGMENTS, prepare  # noqa: E402
from tests.orchestration.dagster_server import dagster_server, graphql, wait_until_ended  # noqa: E402

LAUNCH = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""


def use_home(home: Path) -> dict[str, str]:
    """Point this process at `home` (as the test's monkeypatch does); return the env a server there needs."""
    env = {"TOKENLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    os.environ.update(env)
    os.environ.pop("TOKENLAKE_CATALOG", None)
    return env


def curated_records() -> list[tuple[str, str, str]]:
    rows = Lakehouse().scan(CURATED_DOCUMENTS, ("crawl", "segment", "record_id")).to_pylist()
    return sorted((r["crawl"], r["segment"], r["record_id"]) for r in rows)


def in_process(work: Path) -> tuple[float, list]:
    home, crawl = work / "tokenlake", work / "crawl"
    use_home(home)
    prepare(home, crawl)
    defs = build_defs(str(crawl))
    with dg.DagsterInstance.get() as instance:
        t0 = time.perf_counter()
        for key in SEGMENTS:
            run_job(defs, instance, "curate", key)
        seconds = time.perf_counter() - t0
    return seconds, curated_records()


def backfill(work: Path) -> tuple[float, dict, list]:
    home, crawl = work / "tokenlake", work / "crawl"
    env = {**use_home(home), "TOKENLAKE_CRAWL_ROOT": str(crawl)}
    prepare(home, crawl)
    server_dir = work / "server"
    server_dir.mkdir()
    with dagster_server(server_dir, "dagster dev", env_extra=env) as port:
        params = {"partitionNames": list(SEGMENTS), "assetSelection": [{"path": ["curated", "documents"]}]}
        t0, launched_at = time.perf_counter(), time.time()  # run times in GraphQL are epoch seconds
        launched = graphql(port, LAUNCH, {"params": params})["launchPartitionBackfill"]
        if launched["__typename"] != "LaunchBackfillSuccess":
            raise SystemExit(f"the backfill was not launched: {launched}")
        record = wait_until_ended(
            port, BACKFILL, {"id": launched["backfillId"]}, "partitionBackfillOrError", lambda s: s not in RUNNING
        )
        seconds = time.perf_counter() - t0
    if record["status"] != "COMPLETED_SUCCESS":
        raise SystemExit(f"backfill {launched['backfillId']} ended {record}; see {server_dir}")
    split = {  # where the time went: the daemon's pick-up, then the run processes (start-up, then the work)
        "to_first_run_created_s": round(min(r["creationTime"] for r in record["runs"]) - launched_at, 2),
        "run_process_s": [round(r["endTime"] - r["startTime"], 2) for r in record["runs"]],
    }
    return seconds, split, curated_records()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    out = sys.stderr if args.json else sys.stdout
    with tempfile.TemporaryDirectory(prefix="tokenlake-bench-backfill-") as tmp:
        with contextlib.redirect_stdout(sys.stderr):  # the runs' progress lines
            base_s, base_rows = in_process(Path(tmp) / "in-process")
            fill_s, split, fill_rows = backfill(Path(tmp) / "backfill")
    if fill_rows != base_rows:
        raise SystemExit(f"the backfill curated {len(fill_rows)} records, in-process {len(base_rows)}: not the same")
    result = {
        "partitions": len(SEGMENTS),
        "records": len(base_rows),
        "in_process_s": round(base_s, 2),
        "backfill_s": round(fill_s, 2),
        "ratio_in_process_over_backfill": round(base_s / fill_s, 3),
        **split,
    }
    print(
        f"curated/documents over {len(SEGMENTS)} partitions ({len(base_rows)} records): in-process run_job "
        f"{base_s:.1f} s, backfill of dagster dev {fill_s:.1f} s (launch to end); "
        f"ratio in-process / backfill {base_s / fill_s:.2f}x; launch to the first run created "
        f"{split['to_first_run_created_s']:.1f} s, each run's process {split['run_process_s']} s",
        file=out,
    )
    if args.json:
        print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
