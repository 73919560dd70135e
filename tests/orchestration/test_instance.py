"""The local instance's pools: one materialisation per state on SQLite (commits would be lost under
contention), TOKENLAKE_POOL_LIMIT (default 4) on PostgreSQL/REST catalogs, which resolve commit races."""

from __future__ import annotations

import pytest
import yaml

from orchestration.instance import MARK, POOL_LIMIT, prepare_dagster_home


@pytest.fixture(autouse=True)
def restore_dagster_home(tmp_path, monkeypatch):
    """prepare_dagster_home exports DAGSTER_HOME: let monkeypatch put the old value back."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))


def pools(home) -> int:
    return yaml.safe_load((home / "dagster.yaml").read_text())["concurrency"]["pools"]["default_limit"]


def test_sqlite_catalog_gets_one_run_per_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENLAKE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    assert pools(prepare_dagster_home(tmp_path / "dagster")) == 1


def test_postgres_catalog_raises_the_pools_and_rewrites_our_file(tmp_path, monkeypatch):
    home = tmp_path / "dagster"
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    prepare_dagster_home(home)
    cfg = tmp_path / "catalog.yaml"
    props = {"type": "sql", "uri": "postgresql+psycopg2://u:p@127.0.0.1:1/db", "warehouse": "s3://b/wh"}
    cfg.write_text(yaml.safe_dump({"name": "tokenlake", "properties": props}))
    monkeypatch.setenv("TOKENLAKE_CATALOG", str(cfg))
    assert pools(prepare_dagster_home(home)) == POOL_LIMIT
    monkeypatch.setenv("TOKENLAKE_POOL_LIMIT", "9")
    assert pools(prepare_dagster_home(home)) == 9
    monkeypatch.setenv("TOKENLAKE_POOL_LIMIT", "zero")
    with pytest.raises(ValueError, match="TOKENLAKE_POOL_LIMIT must be a positive integer, got 'zero'"):
        prepare_dagster_home(home)


def test_a_dagster_yaml_written_by_hand_is_left_alone(tmp_path, monkeypatch):
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 7\n")
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    prepare_dagster_home(home)
    assert pools(home) == 7 and not (home / "dagster.yaml").read_text().startswith(MARK)
