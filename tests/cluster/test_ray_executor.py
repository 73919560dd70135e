"""The Ray executor on a real 2-node Ray cluster (loopback, 1 CPU per node), through real Dagster runs into a
real catalog: same tables as in-process (near duplicates with another partition count too), tasks on both
nodes, a failing task fails the step naming its input with no snapshot committed, a worker killed mid-task (a
curate task, a near-dedup task) is retried."""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest

from assets.raw import defs as raw_defs
from iceberg_catalog import Lakehouse
from iceberg_catalog.digest import table_digest
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    DEDUP_NEAR_DUPLICATES,
    RAW_REJECTED_RECORDS,
    RAW_WARC_RECORDS,
)
from resources import IcebergCatalogResource, LocalCrawlSource, TaskExecutorResource, WarcFileRef
from resources import executor as executor_module
from resources.executor import ClusterUnreachableError, RayExecutor, TaskFailedError, disconnect_ray
from tests.cluster.ray_cluster import HEAD_IP, RayCluster, as_driver, cmdline, free_port, ray_cluster

from conftest import SAMPLE_CRAWL, SAMPLE_KEYS, materialize_assets, materialize_segments

pytestmark = pytest.mark.slow  # a real cluster and two builds of the sample lakehouse: ~2 min on 2 cores

TABLES = (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS, CURATED_DOCUMENTS, DEDUP_NEAR_DUPLICATES)
HERITRIX = "LEGACY-ARCHIVES/heritrix-2008"
WGET = "LEGACY-ARCHIVES/wget-2024"


@pytest.fixture(scope="module")
def cluster():
    """One cluster for the module (starting one takes ~15 s); this process is its driver."""
    with ray_cluster(workers=1) as c, as_driver(c):
        yield c


def use_ray(monkeypatch, cluster: RayCluster, retries: int = 3) -> None:
    """Select the Ray executor by environment only (what a deployment does; no code or resource change)."""
    monkeypatch.setenv("TOKENLAKE_EXECUTOR", "ray")
    monkeypatch.setenv("TOKENLAKE_RAY_ADDRESS", cluster.address)
    monkeypatch.setenv("TOKENLAKE_RAY_MAX_RETRIES", str(retries))


def near_config(partitions: int) -> dict:
    return {"ops": {"dedup__near_duplicates": {"config": {"verify": "estimated", "partitions": partitions}}}}


def build(home: Path, lm: str, partitions: int) -> tuple[dict, float]:
    """raw + curated/documents + MinHash for the 4 sample partitions into `home`, then near duplicates cut into
    `partitions`: digests per table, seconds."""
    os.environ["TOKENLAKE_HOME"] = str(home)
    t0 = time.perf_counter()
    with dg.instance_for_test() as instance:
        materialize_segments(instance, SAMPLE_CRAWL, SAMPLE_KEYS)
        materialize_segments(instance, SAMPLE_CRAWL, SAMPLE_KEYS, selection="curated/documents", lm_path=lm)
        materialize_segments(instance, SAMPLE_CRAWL, SAMPLE_KEYS, selection="dedup/minhash_bands")
        materialize_assets(instance, "dedup/near_duplicates", run_config=near_config(partitions))
    lakehouse = Lakehouse()
    return {t.identifier: table_digest(lakehouse, t) for t in TABLES}, time.perf_counter() - t0


@pytest.fixture(scope="module")
def builds(cluster, tmp_path_factory, reference_lm_file):
    """The same lakehouse built in-process and on Ray (executor chosen by environment only)."""
    root = tmp_path_factory.mktemp("builds")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENLAKE_EXECUTOR", "in_process")
        mp.delenv("TOKENLAKE_CATALOG", raising=False)
        mp.setenv("TOKENLAKE_HOME", str(root / "local"))
        local, local_s = build(root / "local", reference_lm_file, partitions=1)
        use_ray(mp, cluster)
        before = dict(executor_module.TASKS_PER_NODE)
        on_ray, ray_s = build(root / "ray", reference_lm_file, partitions=3)
    per_node = {ip: n - before.get(ip, 0) for ip, n in executor_module.TASKS_PER_NODE.items()}
    print(f"\nin-process {local_s:.1f} s, ray {ray_s:.1f} s; tasks per node: {per_node}; digests: {on_ray}")
    return {"local": local, "ray": on_ray, "per_node": per_node, "ray_home": root / "ray"}


def test_ray_builds_the_same_tables_as_in_process_on_both_nodes(builds, cluster):
    assert builds["ray"] == builds["local"]
    local = builds["local"]
    assert local[RAW_WARC_RECORDS.identifier]["rows"] > 0 and local[CURATED_DOCUMENTS.identifier]["rows"] > 0
    assert local[DEDUP_NEAR_DUPLICATES.identifier]["rows"] > 0
    per_node = builds["per_node"]
    assert set(per_node) == set(cluster.node_ips) and all(n > 0 for n in per_node.values())


@contextmanager
def killing_first(cluster: RayCluster, title: str, delay_s: float):
    """While the block runs, SIGKILL the first Ray worker seen whose process title starts with `title`, `delay_s`
    after seeing it; yields the list of killed workers' titles."""
    killed: list[str] = []
    stop = threading.Event()

    def killer():
        while not stop.is_set() and not killed:
            for ip in cluster.node_ips:
                for pid in cluster.worker_pids(ip):
                    if cmdline(pid).startswith(title):
                        time.sleep(delay_s)
                        os.kill(pid, signal.SIGKILL)
                        killed.append(title)
                        return
            time.sleep(0.005)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        yield killed
    finally:
        stop.set()
        thread.join(10)


class MissingFileSource(LocalCrawlSource):
    """The segment's real WARC files plus one that is gone when a task opens it (on every attempt)."""

    def warc_files(self, ref):
        gone = Path(self.root) / "gone" / "missing-0000.warc.gz"
        return [*super().warc_files(ref), WarcFileRef(gone.as_uri(), 1234)]


def ingest(instance, source: LocalCrawlSource, key: str, executor: TaskExecutorResource, raise_on_error=True):
    return dg.materialize(
        list(raw_defs.defs.assets),
        partition_key=key,
        instance=instance,
        resources={"catalog": IcebergCatalogResource(), "crawl_source": source, "executor": executor},
        raise_on_error=raise_on_error,
    )


def test_a_task_failing_every_attempt_fails_the_step_naming_its_input_and_commits_nothing(
    tokenlake_home, instance, cluster
):
    instance.add_dynamic_partitions("crawl_segments", [WGET])
    ray_executor = TaskExecutorResource(kind="ray", address=cluster.address, max_retries=1)
    assert ingest(instance, LocalCrawlSource(root=str(SAMPLE_CRAWL)), WGET, ray_executor).success
    lakehouse = Lakehouse()
    snapshots = lakehouse.snapshot_ids([RAW_WARC_RECORDS, RAW_REJECTED_RECORDS])
    digests = [table_digest(lakehouse, t) for t in (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS)]
    with pytest.raises(Exception) as failed:
        ingest(instance, MissingFileSource(root=str(SAMPLE_CRAWL)), WGET, ray_executor)
    chain, exc = [], failed.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__
    error = next(e for e in chain if isinstance(e, TaskFailedError))
    print(f"\n{error}")
    assert "task 2" in str(error) and "missing-0000.warc.gz" in str(error) and "FileNotFoundError" in str(error)
    assert "(2)" in str(error) and cluster.address in str(error)
    assert lakehouse.snapshot_ids([RAW_WARC_RECORDS, RAW_REJECTED_RECORDS]) == snapshots
    assert [table_digest(lakehouse, t) for t in (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS)] == digests


def test_an_unreachable_address_is_named_before_any_task_runs(tokenlake_home, instance):
    address = f"{HEAD_IP}:{free_port()}"  # nothing listens there
    instance.add_dynamic_partitions("crawl_segments", [WGET])
    with pytest.raises(Exception) as failed:
        ray_executor = TaskExecutorResource(kind="ray", address=address)
        ingest(instance, LocalCrawlSource(root=str(SAMPLE_CRAWL)), WGET, ray_executor)
    assert address in str(failed.value) or address in str(failed.value.__cause__)
    assert Lakehouse().snapshot_id(RAW_WARC_RECORDS) is None
    ran = []
    with pytest.raises(ClusterUnreachableError, match=address):
        RayExecutor(address, connect_timeout_s=2).map(ran.append, [1, 2])
    assert ran == []


def test_a_worker_killed_mid_task_is_retried_and_the_partition_is_identical(
    builds, monkeypatch, cluster, reference_lm_file
):
    """SIGKILL the Ray worker process running a curate task of a partition being rebuilt: Ray retries the
    task, the partition is committed again and the table still equals the in-process one."""
    use_ray(monkeypatch, cluster)
    monkeypatch.setenv("TOKENLAKE_HOME", str(builds["ray_home"]))
    lakehouse = Lakehouse()
    snapshot = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    with killing_first(cluster, "ray::assets.curated.curate.run_task", delay_s=0.3) as killed:  # well into it
        with dg.instance_for_test() as instance:
            materialize_segments(
                instance, SAMPLE_CRAWL, [HERITRIX], selection="curated/documents", lm_path=reference_lm_file
            )
    print(f"\nkilled worker {killed}")
    assert killed, "no curate task was seen running"
    assert lakehouse.snapshot_id(CURATED_DOCUMENTS) != snapshot  # the partition was committed again
    assert table_digest(lakehouse, CURATED_DOCUMENTS) == builds["local"][CURATED_DOCUMENTS.identifier]


def test_a_near_dedup_task_killed_mid_run_is_retried_and_the_table_is_identical(builds, monkeypatch, cluster):
    """SIGKILL the Ray worker running the first near-dedup task seen while every crawl is recomputed: Ray retries
    it (a retried task rewrites its own scratch file), and the committed table equals the in-process one."""
    use_ray(monkeypatch, cluster)
    monkeypatch.setenv("TOKENLAKE_HOME", str(builds["ray_home"]))
    lakehouse = Lakehouse()
    snapshot = lakehouse.snapshot_id(DEDUP_NEAR_DUPLICATES)
    with killing_first(cluster, "ray::assets.dedup.near_pairs.", delay_s=0.0) as killed:
        with dg.instance_for_test() as instance:  # threshold 0.81: a new config, so every crawl is recomputed
            config = near_config(2)
            config["ops"]["dedup__near_duplicates"]["config"]["threshold"] = 0.81
            materialize_assets(instance, "dedup/near_duplicates", run_config=config)
            config["ops"]["dedup__near_duplicates"]["config"]["threshold"] = 0.8
            materialize_assets(instance, "dedup/near_duplicates", run_config=config)
    print(f"\nkilled {killed}")
    assert killed, "no near-dedup task was seen running"
    assert lakehouse.snapshot_id(DEDUP_NEAR_DUPLICATES) != snapshot
    assert table_digest(lakehouse, DEDUP_NEAR_DUPLICATES) == builds["local"][DEDUP_NEAR_DUPLICATES.identifier]


def test_the_ray_client_address_works_too(cluster):
    """`ray://host:port` (Ray Client, for a driver outside the cluster's network) runs the same map."""
    offset = 1000  # a closure: pickled by value, so the workers need nothing of this test module

    def plus(x: int) -> int:
        return x + offset

    executor = TaskExecutorResource(kind="ray", address=cluster.client_address, max_retries=0).executor()
    try:
        assert sorted(executor.map(plus, [3, 1, 2])) == [1001, 1002, 1003]
        assert sum(executor.tasks_per_node.values()) == 3
        with pytest.raises(TaskFailedError, match=r"task 1 \(int\) failed on every attempt \(1\)"):
            executor.map(lambda x: 1 // x, [1, 0, 2])
    finally:
        disconnect_ray()
