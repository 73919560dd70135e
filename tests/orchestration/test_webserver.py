"""The Definitions served by a real dagster-webserver / `dagster dev` on 127.0.0.1, queried over GraphQL."""

from __future__ import annotations

import time

from dagster_server import dagster_server, graphql

ASSET_KEYS = "{ assetNodes { assetKey { path } } }"


def test_webserver_serves_the_asset_keys(tmp_path):
    with dagster_server(tmp_path, "dagster-webserver") as port:
        nodes = graphql(port, ASSET_KEYS)["assetNodes"]
        keys = {"/".join(n["assetKey"]["path"]) for n in nodes}
        assert {"raw/warc_records", "raw/rejected_records"} <= keys


SENSOR = """
query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename ... on Sensor {
  name sensorState { status ticks(limit: 5) { status runKeys } } } } }"""
START = """
mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename
  ... on Sensor { sensorState { status } } ... on PythonError { message } } }"""


def test_sensor_can_be_turned_on_and_ticks(tmp_path):
    """What a user does in the UI: turn `new_crawl_segments` on, then see a successful tick with run keys."""
    with dagster_server(tmp_path, "dagster dev") as port:
        sel = {
            "repositoryLocationName": "tokenlake",
            "repositoryName": "__repository__",
            "sensorName": "new_crawl_segments",
        }
        assert graphql(port, START, {"s": sel})["startSensor"]["sensorState"]["status"] == "RUNNING"
        deadline = time.monotonic() + 120
        ticks = []
        while time.monotonic() < deadline:
            ticks = graphql(port, SENSOR, {"s": sel})["sensorOrError"]["sensorState"]["ticks"]
            if any(t["status"] == "SUCCESS" for t in ticks):
                break
            time.sleep(1)
        done = [t for t in ticks if t["status"] == "SUCCESS"]
        assert done, ticks
        assert sorted(done[-1]["runKeys"]) == [
            "CC-MAIN-2020-34/1596439738015.38",
            "CC-MAIN-2024-22/1715971057216.39",
            "LEGACY-ARCHIVES/heritrix-2008",
            "LEGACY-ARCHIVES/rust-docs-2026",
            "LEGACY-ARCHIVES/wget-2024",
        ]
