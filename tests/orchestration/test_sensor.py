"""The crawl sensor: a new segment directory -> exactly its partition; the next tick requests nothing."""

from __future__ import annotations

import shutil

import dagster as dg

from assets.raw.defs import new_crawl_segments
from resources import LocalCrawlSource

from conftest import SAMPLE_CRAWL


def tick(instance, root, cursor):
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"crawl_source": LocalCrawlSource(root=str(root))}
    ) as ctx:
        result = new_crawl_segments(ctx)
    if isinstance(result, dg.SkipReason):
        return [], [], cursor
    adds = [k for r in result.dynamic_partitions_requests for k in r.partition_keys]
    for r in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(r.partitions_def_name, list(r.partition_keys))
    return [r.partition_key for r in result.run_requests], adds, result.cursor


def test_new_segment_is_requested_once(instance, crawl_root, tmp_path):
    cc = next(SAMPLE_CRAWL.rglob("CC-MAIN-2020-34/**/*.warc.gz"))
    root = crawl_root({"CC-MAIN-2020-34/1596439738015.38": {"a.warc.gz": cc}})

    requested, added, cursor = tick(instance, root, None)
    assert requested == added == ["CC-MAIN-2020-34/1596439738015.38"]
    assert instance.get_dynamic_partitions("crawl_segments") == ["CC-MAIN-2020-34/1596439738015.38"]

    assert tick(instance, root, cursor)[0] == []  # idempotent: nothing new

    new_dir = root / "crawl-data" / "CC-MAIN-2024-22" / "segments" / "1715971057216.39" / "warc"
    new_dir.mkdir(parents=True)
    shutil.copyfile(cc, new_dir / "b.warc.gz")
    requested, added, cursor = tick(instance, root, cursor)
    assert requested == added == ["CC-MAIN-2024-22/1715971057216.39"]
    assert tick(instance, root, cursor)[0] == []
    assert sorted(instance.get_dynamic_partitions("crawl_segments")) == [
        "CC-MAIN-2020-34/1596439738015.38",
        "CC-MAIN-2024-22/1715971057216.39",
    ]


def test_segment_without_warc_dir_is_not_a_partition(instance, crawl_root):
    root = crawl_root({})
    (root / "crawl-data" / "CC-MAIN-2099-01" / "segments" / "123.4").mkdir(parents=True)
    assert tick(instance, root, None)[0] == []


def test_sensor_is_registered_with_its_job():
    from orchestration.definitions import defs

    sensor = defs.resolve_sensor_def("new_crawl_segments")
    assert sensor.job_name == "raw_ingest"
    assert sensor.minimum_interval_seconds == 60
