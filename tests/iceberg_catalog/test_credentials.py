"""Secrets never travel with a task: a pickled Lakehouse / TaskOutput holds no secret value, and the process
that unpickles it takes the secrets from its own TOKENLAKE_CATALOG when that names the same catalog."""

from __future__ import annotations

import pickle

import pytest
import yaml

from iceberg_catalog import CatalogConfig, Lakehouse
from iceberg_catalog.catalog import CatalogConfigError
from iceberg_catalog.commit import TaskOutput
from iceberg_catalog.credentials import portable

PASSWORD, SECRET, KEY_ID = "pw-6f1d2c", "sk-91ab77c0", "AKIA-TEST-1"
PROPS = {
    "type": "sql",
    "uri": f"postgresql+psycopg2://tokenlake:{PASSWORD}@127.0.0.1:5432/tokenlake",
    "warehouse": "s3://bucket/wh",
    "s3.endpoint": "http://127.0.0.1:9000",
    "s3.access-key-id": KEY_ID,
    "s3.secret-access-key": SECRET,
}


def write_catalog_file(tmp_path, props) -> str:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump({"name": "tokenlake", "properties": props}))
    return str(path)


def test_portable_removes_secret_values_uri_password_and_the_paired_key_id():
    public, removed = portable(PROPS)
    assert removed == ("s3.access-key-id", "s3.secret-access-key", "uri-password")
    assert public["uri"] == "postgresql+psycopg2://tokenlake@127.0.0.1:5432/tokenlake"
    assert PASSWORD not in str(public) and SECRET not in str(public) and KEY_ID not in str(public)


def test_a_pickled_lakehouse_and_task_output_hold_no_secret(monkeypatch):
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    lakehouse = Lakehouse(CatalogConfig("tokenlake", PROPS))
    out = TaskOutput("raw.warc_records", "s3://bucket/wh/raw/warc_records", {"crawl": "c"}, "run", 0, PROPS)
    for obj in (lakehouse, out, (lakehouse, [out])):
        blob = pickle.dumps(obj)
        for secret in (PASSWORD, SECRET, KEY_ID):
            assert secret.encode() not in blob
    back = pickle.loads(pickle.dumps(lakehouse))
    assert back.config.missing == ("s3.access-key-id", "s3.secret-access-key", "uri-password")
    with pytest.raises(CatalogConfigError, match="uri-password did not travel with this task.*TOKENLAKE_CATALOG"):
        back.config.load()
    assert pickle.loads(pickle.dumps(out)).io_properties == portable(PROPS)[0]  # S3: the AWS chain


def test_the_unpickling_process_takes_the_secrets_of_the_same_catalog_from_its_own_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENLAKE_CATALOG", write_catalog_file(tmp_path, PROPS))
    back = pickle.loads(pickle.dumps(Lakehouse(CatalogConfig("tokenlake", PROPS))))
    assert dict(back.config.properties) == PROPS and back.config.missing == ()
    out = TaskOutput("raw.warc_records", "s3://bucket/wh/raw/warc_records", {}, "run", 3, PROPS)
    assert dict(pickle.loads(pickle.dumps(out)).io_properties) == PROPS


def test_another_catalog_in_the_local_file_lends_no_secret(tmp_path, monkeypatch):
    other = {**PROPS, "warehouse": "s3://other/wh", "uri": "postgresql+psycopg2://tokenlake:x@10.0.0.9/other"}
    monkeypatch.setenv("TOKENLAKE_CATALOG", write_catalog_file(tmp_path, other))
    back = pickle.loads(pickle.dumps(Lakehouse(CatalogConfig("tokenlake", PROPS))))
    assert "s3.secret-access-key" not in back.config.properties and back.config.missing
    out = TaskOutput("raw.warc_records", "s3://bucket/wh/raw/warc_records", {}, "run", 3, PROPS)
    assert "s3.secret-access-key" not in pickle.loads(pickle.dumps(out)).io_properties


def test_the_embedded_catalog_pickles_unchanged(tmp_path):
    config = CatalogConfig.embedded(tmp_path)
    assert pickle.loads(pickle.dumps(config)) == config
