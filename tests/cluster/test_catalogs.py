"""The whole pipeline (the demo's job sequence) on three setups, by configuration only: (a) in-process tasks +
embedded SQLite + local files, (b) tasks on a 2-node Ray cluster + PostgreSQL catalog + S3 warehouse
(SeaweedFS), (c) tasks on Ray + SeaweedFS's Iceberg REST catalog + S3. Every table's rows and content hash and
the run view samples digest are identical, and both Ray nodes ran tasks; no secret value set for (b)/(c)
appears in snapshot properties, Dagster's event log (asset metadata, logs), run tags, the run view manifest or
the Ray cluster's logs (the nodes hold the catalog file themselves: tasks carry no secret). Bad configuration
fails naming the value.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from iceberg_catalog import TABLES, CatalogConfig, Lakehouse
from iceberg_catalog.catalog import CatalogConfigError
from iceberg_catalog.digest import lakehouse_digest
from iceberg_catalog.schemas import RUN_VIEW_MANIFESTS
from resources.executor import TASKS_PER_NODE
from tests.cluster.ray_cluster import as_driver, ray_cluster
from tests.cluster.servers import postgres, seaweedfs  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

SAMPLES_DIGEST_PREFIX = "18626a03aa4d"
DIGESTS: dict[str, dict] = {}  # setup -> lakehouse digest, filled by the pipeline tests in file order


@pytest.fixture(scope="module")
def ray_nodes(tmp_path_factory):
    """A 2-node Ray cluster (1 CPU each) whose nodes read the catalog file at a fixed path (each setup writes
    its own there before it runs): what a deployment mounts on its nodes. This process is the driver."""
    catalog_file = tmp_path_factory.mktemp("ray-catalog") / "catalog.yaml"
    with ray_cluster(workers=1, node_env={"TOKENLAKE_CATALOG": str(catalog_file)}) as cluster, as_driver(cluster):
        yield cluster, catalog_file


def ray_logs(cluster) -> list[str]:
    """Every log file the cluster's nodes wrote."""
    return [p.read_text(errors="replace") for p in Path(cluster.temp_dir).rglob("*") if p.is_file() and p.suffix in
            (".log", ".out", ".err", ".txt")]  # fmt: skip


def run_demo_pipeline(home: Path, properties: dict[str, str] | None, monkeypatch, ray=None) -> tuple[dict, dict]:
    """`run_pipeline` of `make demo` under a fresh TOKENLAKE_HOME with the catalog from a TOKENLAKE_CATALOG
    file (None: the embedded default), tasks on `ray` ((cluster, its nodes' catalog file); None: in-process);
    returns the lakehouse digest and what to grep for secrets."""
    from orchestration.definitions import build_defs
    from orchestration.demo import run_pipeline

    monkeypatch.setenv("TOKENLAKE_HOME", str(home))
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    if properties is not None:
        cfg = ray[1] if ray else home.parent / f"{home.name}-catalog.yaml"
        cfg.write_text(yaml.safe_dump({"name": "tokenlake", "properties": properties}))
        monkeypatch.setenv("TOKENLAKE_CATALOG", str(cfg))
    if ray:
        monkeypatch.setenv("TOKENLAKE_EXECUTOR", "ray")
        monkeypatch.setenv("TOKENLAKE_RAY_ADDRESS", ray[0].address)
        TASKS_PER_NODE.clear()
    config = CatalogConfig.resolve()
    config.check()
    defs = build_defs()  # fresh resources: the catalog resource resolves TOKENLAKE_CATALOG now
    with dg.instance_for_test() as instance:
        t0 = time.perf_counter()
        run_pipeline(defs, instance)
        seconds = time.perf_counter() - t0
        entries = [e for run in instance.get_runs() for e in instance.all_logs(run.run_id)]
        logs = [dg.serialize_value(e) for e in entries]
        materialization = dg.DagsterEventType.ASSET_MATERIALIZATION  # their metadata is what the UI shows
        events = [dg.serialize_value(e) for e in entries if e.dagster_event_type == materialization]
        runs = [dg.serialize_value(run) for run in instance.get_runs()]
    lakehouse = Lakehouse(config)
    digest = lakehouse_digest(lakehouse)
    snapshots = [  # whole table metadata: snapshot summaries (provenance), table properties, refs
        lakehouse.table(t).metadata.model_dump_json() for t in TABLES.values()
    ]
    manifests = lakehouse.scan(RUN_VIEW_MANIFESTS, ("manifest_json",))["manifest_json"].to_pylist()
    print(f"pipeline on {config.describe()}: {seconds:.1f} s; samples {digest['run_view.samples_digest']}")
    texts = {"events": events, "logs": logs, "runs": runs, "snapshots": snapshots, "manifests": manifests}
    if ray:
        print(f"tasks per Ray node: {dict(TASKS_PER_NODE)}")
        assert set(TASKS_PER_NODE) == set(ray[0].node_ips) and min(TASKS_PER_NODE.values()) > 0, TASKS_PER_NODE
        texts["ray_logs"] = ray_logs(ray[0])
    return digest, texts


def assert_no_secret(secrets: list[str], texts: dict) -> None:
    for kind, items in texts.items():
        assert items, kind  # something was written, so the grep means something
        for text in items:
            for secret in secrets:
                assert secret not in text, f"a secret value appears in {kind}"


def check_digest(name: str, digest: dict) -> None:
    DIGESTS[name] = digest
    print(f"digest {name}: {json.dumps(digest, sort_keys=True)}")
    assert digest["run_view.samples_digest"] and all(
        d.startswith(SAMPLES_DIGEST_PREFIX) for d in digest["run_view.samples_digest"]
    ), digest["run_view.samples_digest"]
    assert digest["raw.warc_records"]["rows"] > 0 and digest["tokenized.documents"]["rows"] > 0, digest
    if name != "embedded" and "embedded" in DIGESTS:
        want = DIGESTS["embedded"]
        diff = {
            k: (want.get(k), digest.get(k)) for k in sorted(set(want) | set(digest)) if want.get(k) != digest.get(k)
        }
        assert not diff, f"{name} differs from embedded: {diff}"


def test_pipeline_embedded_sqlite_local_files(tmp_path, monkeypatch):
    digest, _ = run_demo_pipeline(tmp_path / "home", None, monkeypatch)
    check_digest("embedded", digest)


def test_pipeline_ray_postgres_catalog_s3_warehouse(tmp_path, monkeypatch, postgres, seaweedfs, ray_nodes):  # noqa: F811
    props = seaweedfs.sql_catalog_properties(postgres.sqlalchemy_uri, "wh-sql")
    digest, texts = run_demo_pipeline(tmp_path / "home", props, monkeypatch, ray_nodes)
    check_digest("postgres+s3", digest)
    files = seaweedfs.client().list_objects_v2(Bucket=seaweedfs.bucket, Prefix="wh-sql/")
    assert files["KeyCount"] > 0  # the data went to S3
    assert_no_secret([postgres.password, seaweedfs.secret_key], texts)


def test_pipeline_ray_rest_catalog_s3(tmp_path, monkeypatch, seaweedfs, ray_nodes):  # noqa: F811
    props = seaweedfs.rest_catalog_properties()
    digest, texts = run_demo_pipeline(tmp_path / "home", props, monkeypatch, ray_nodes)
    check_digest("rest+s3", digest)
    assert_no_secret([seaweedfs.secret_key], texts)


# --- bad configuration: a clear error naming the value, before any work --------------------------------


def test_check_names_unreachable_postgres_uri(postgres):  # noqa: F811
    uri = f"postgresql+psycopg2://{postgres.user}:{postgres.password}@127.0.0.1:1/{postgres.database}"
    with pytest.raises(CatalogConfigError, match=r"catalog uri 'postgresql\+psycopg2://tokenlake:\*\*\*@127.0.0.1:1/"):
        CatalogConfig("t", {"type": "sql", "uri": uri}).check()


def test_check_names_wrong_postgres_password(postgres):  # noqa: F811
    uri = f"postgresql+psycopg2://{postgres.user}:wrong-{postgres.password}@{postgres.host}:{postgres.port}/tokenlake"
    with pytest.raises(CatalogConfigError, match="refused the login") as err:
        CatalogConfig("t", {"type": "sql", "uri": uri}).check()
    assert postgres.password not in str(err.value)


def test_check_names_missing_bucket_and_wrong_keys(postgres, seaweedfs):  # noqa: F811
    good = seaweedfs.sql_catalog_properties(postgres.sqlalchemy_uri, "wh-check")
    CatalogConfig("t", good).check()
    with pytest.raises(CatalogConfigError, match="bucket 'no-such-bucket' does not exist"):
        CatalogConfig("t", {**good, "warehouse": "s3://no-such-bucket/wh"}).check()
    with pytest.raises(CatalogConfigError, match="s3.access-key-id 'AKIAWRONG' .* was refused") as err:
        CatalogConfig("t", {**good, "s3.access-key-id": "AKIAWRONG"}).check()
    with pytest.raises(CatalogConfigError, match="refused") as err:
        CatalogConfig("t", {**good, "s3.secret-access-key": "not-the-secret"}).check()
    assert "not-the-secret" not in str(err.value) and seaweedfs.secret_key not in str(err.value)
    with pytest.raises(CatalogConfigError, match="s3.endpoint 'http://127.0.0.1:1' is unreachable"):
        CatalogConfig("t", {**good, "s3.endpoint": "http://127.0.0.1:1"}).check()


def test_check_names_rest_problems(seaweedfs):  # noqa: F811
    good = seaweedfs.rest_catalog_properties()
    CatalogConfig("t", good).check()
    with pytest.raises(CatalogConfigError, match="catalog uri 'http://127.0.0.1:1' is unreachable"):
        CatalogConfig("t", {**good, "uri": "http://127.0.0.1:1"}).check()
    with pytest.raises(CatalogConfigError, match="opening the catalog failed") as err:
        CatalogConfig("t", {**good, "credential": f"{seaweedfs.access_key}:wrong"}).check()
    assert seaweedfs.secret_key not in str(err.value)


def test_fingerprint_and_describe_hold_no_secret(postgres, seaweedfs):  # noqa: F811
    config = CatalogConfig("t", seaweedfs.sql_catalog_properties(postgres.sqlalchemy_uri))
    for text in (config.fingerprint(), config.describe(), repr(Lakehouse(config))):
        assert postgres.password not in text and seaweedfs.secret_key not in text, text
