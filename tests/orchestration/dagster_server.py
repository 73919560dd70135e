"""Start and stop a real Dagster webserver (or `dagster dev`) on 127.0.0.1 for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import requests

from orchestration.instance import DAGSTER_YAML

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    r = requests.post(
        f"http://127.0.0.1:{port}/graphql", json={"query": query, "variables": variables or {}}, timeout=30
    )
    r.raise_for_status()
    body = r.json()
    assert "errors" not in body, body
    return body["data"]


def wait_until_ended(port: int, query: str, variables: dict, field: str, ended) -> dict:
    """Poll GraphQL `query` every 0.5 s until `ended(record["status"])`, where record is `data[field]`; return it.
    No deadline of its own: a run or backfill that never ends is cut by the suite's per-test timeout
    (pyproject's `timeout`), and a server that dies ends the poll with a connection error."""
    while not ended((record := graphql(port, query, variables)[field]).get("status")):
        time.sleep(0.5)
    return record


@contextmanager
def dagster_server(tmp_path: Path, command: str = "dagster-webserver", env_extra: dict | None = None):
    """Yield the port of a server started with a fresh DAGSTER_HOME; kill its whole process group after."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "TOKENLAKE_HOME": str(tmp_path / "tokenlake"), **(env_extra or {})}
    bin_dir = Path(sys.executable).parent
    args = [str(bin_dir / "dagster-webserver")] if command == "dagster-webserver" else [str(bin_dir / "dagster"), "dev"]
    log = open(tmp_path / f"{command}.log", "w")
    proc = subprocess.Popen(
        [*args, "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{command} exited with {proc.returncode}: {(tmp_path / f'{command}.log').read_text()[-3000:]}"
                )
            try:
                if requests.get(f"http://127.0.0.1:{port}/server_info", timeout=2).ok:
                    data = graphql(
                        port, "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
                    )
                    entries = data["workspaceOrError"]["locationEntries"]
                    if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                        break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{command} did not load in 180 s")
            time.sleep(0.5)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader: unreaped, its zombie keeps the group alive until the SIGKILL deadline
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        log.close()
