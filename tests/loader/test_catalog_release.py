"""Opening a run view from a server catalog leaves no connection behind: the training process does not hold a
PostgreSQL connection it no longer uses, and closing it is not left to a garbage collection inside a training
step. Real PostgreSQL 15 on loopback (tests/cluster/servers.py)."""

from __future__ import annotations

import gc
from contextlib import closing

import psycopg2
import pytest
import yaml

from loader import RunViewLoader, open_run_view
from tests.cluster.servers import postgres  # noqa: F401 - fixture

pytestmark = pytest.mark.slow  # a PostgreSQL server


def other_connections(pg) -> int:
    """Client connections to the test database other than the one asking (closed before it returns)."""
    connect = psycopg2.connect(host=pg.host, port=pg.port, user=pg.user, password=pg.password, dbname=pg.database)
    with closing(connect) as con:
        with con.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return int(cur.fetchone()[0])


def test_open_run_view_from_postgres_releases_its_connections(tmp_path, monkeypatch, postgres):  # noqa: F811
    from tests.run_view import builders

    cfg = tmp_path / "catalog.yaml"
    properties = {"type": "sql", "uri": postgres.sqlalchemy_uri, "warehouse": (tmp_path / "warehouse").as_uri()}
    # a catalog name of its own: other tests of the session share the database
    cfg.write_text(yaml.safe_dump({"name": "loader-release", "properties": properties}))
    monkeypatch.setenv("TOKENLAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TOKENLAKE_CATALOG", str(cfg))
    run_view_id = builders.published_view(n_docs=40, seq_len=64, name="release")
    gc.collect()  # the writers' catalogs
    before = other_connections(postgres)
    gc.disable()  # a collection would close a dropped engine's connection and hide one left open
    try:
        view = open_run_view(run_view_id)  # the configured catalog, as training code opens it
        assert other_connections(postgres) == before
        batch = next(iter(RunViewLoader(view, 4, max_steps=1)))
        assert batch["run_view_id"] == run_view_id
        assert other_connections(postgres) == before
    finally:
        gc.enable()
