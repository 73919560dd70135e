"""The real 2-node Ray cluster on loopback for the tests: `orchestration.local_cluster.ray_nodes`, re-exported."""

from orchestration.local_cluster.ray_nodes import (  # noqa: F401 - re-exported for the tests and bench/
    HEAD_IP,
    WORKER_IPS,
    RayCluster,
    cmdline,
    free_port,
    ray_cluster,
    wait_for_nodes,
)
