"""The real 2-node Ray cluster on loopback for the tests: `orchestration.local_cluster.ray_nodes`, re-exported,
plus `as_driver`, which makes this process the cluster's driver for a block."""

import contextlib
import os

from orchestration.local_cluster.ray_nodes import (  # noqa: F401 - re-exported for the tests and bench/
    HEAD_IP,
    WORKER_IPS,
    RayCluster,
    cmdline,
    free_port,
    ray_cluster,
    wait_for_nodes,
)


@contextlib.contextmanager
def as_driver(cluster):
    """This process's Ray auth variables set to the cluster's for the block, then restored; disconnects after."""
    from resources.executor import disconnect_ray

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS")}
    os.environ.update(cluster.env)
    os.environ.pop("RAY_ADDRESS", None)
    try:
        yield cluster
    finally:
        disconnect_ray()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
