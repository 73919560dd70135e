"""The S3 crawl source on a real S3 server (SeaweedFS): the sample crawl uploaded in Common Crawl's layout
(one crawl with its `warc.paths.gz`), segments discovered by the sensor's call, raw ingest streaming from
`s3://` through real Dagster; the raw tables' digests equal the local-directory ingest's."""

from __future__ import annotations

import gzip
import io

import dagster as dg
import pytest

from assets.raw.ingest import S3Stream, open_uri
from iceberg_catalog import Lakehouse
from iceberg_catalog.digest import table_digest
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS, RAW_WARC_RECORDS
from resources.crawl_source import LocalCrawlSource, S3CrawlSource, SegmentRef, crawl_source_for
from tests.cluster.servers import seaweedfs  # noqa: F401 - fixture
from tests.conftest import SAMPLE_CRAWL, SAMPLE_KEYS

pytestmark = pytest.mark.slow  # needs a server: `make test` stays embedded

PREFIX = "mirror"


@pytest.fixture(scope="module")
def crawl_bucket(seaweedfs):  # noqa: F811
    """The sample crawl under s3://<bucket>/mirror/crawl-data/...; CC-MAIN-2024-22 gets a warc.paths.gz."""
    client = seaweedfs.client()
    paths: dict[str, list[str]] = {}
    for f in sorted(SAMPLE_CRAWL.rglob("*")):
        if f.is_file():
            rel = f.relative_to(SAMPLE_CRAWL).as_posix()
            client.upload_file(str(f), seaweedfs.bucket, f"{PREFIX}/{rel}")
            paths.setdefault(rel.split("/")[1], []).append(rel)
    listing = "\n".join(paths["CC-MAIN-2024-22"]) + "\n"
    client.put_object(
        Bucket=seaweedfs.bucket, Key=f"{PREFIX}/crawl-data/CC-MAIN-2024-22/warc.paths.gz",
        Body=gzip.compress(listing.encode()),
    )  # fmt: skip
    return seaweedfs


@pytest.fixture
def aws_env(crawl_bucket, monkeypatch):
    """The standard AWS chain pointing at SeaweedFS (what ingest tasks read, wherever they run)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", crawl_bucket.s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", crawl_bucket.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", crawl_bucket.secret_key)
    monkeypatch.setenv("AWS_REGION", crawl_bucket.region)
    return crawl_bucket


def s3_source(sw) -> S3CrawlSource:
    return S3CrawlSource(bucket=sw.bucket, prefix=PREFIX, endpoint_url=sw.s3_endpoint, region_name=sw.region)


def test_s3_source_lists_like_the_local_directory(aws_env):
    s3, local = s3_source(aws_env), LocalCrawlSource(root=str(SAMPLE_CRAWL))
    assert s3.list_segments() == local.list_segments()
    assert [r.partition_key for r in s3.list_segments()] == sorted(SAMPLE_KEYS)
    for ref in local.list_segments():
        s3_files, local_files = s3.warc_files(ref), local.warc_files(ref)
        assert [f.size for f in s3_files] == [f.size for f in local_files]
        assert all(f.uri.startswith(f"s3://{aws_env.bucket}/{PREFIX}/crawl-data/") for f in s3_files)
        assert s3.fingerprint(s3_files) == local.fingerprint(local_files)
    assert S3CrawlSource(**{**s3_source(aws_env).model_dump(), "crawls": ["CC-MAIN-2024-22"]}).list_segments() == [
        SegmentRef("CC-MAIN-2024-22", "1715971057216.39")
    ]
    with pytest.raises(FileNotFoundError, match="not found"):
        s3.warc_files(SegmentRef("CC-MAIN-2024-22", "nope"))


def test_open_uri_streams_and_resumes_after_a_dropped_connection(aws_env):
    ref = LocalCrawlSource(root=str(SAMPLE_CRAWL)).list_segments()[0]
    local = LocalCrawlSource(root=str(SAMPLE_CRAWL)).warc_files(ref)[0]
    uri = s3_source(aws_env).warc_files(ref)[0].uri
    want = open_uri(local.uri).read()
    with open_uri(uri) as fh:
        assert fh.read() == want

    class Flaky(S3Stream):
        """Drops the connection every 3rd read: the stream must resume with a ranged GET."""

        reads = 0

        def _open(self):
            body = super()._open()
            parent = self

            class Body:
                def read(self, n):
                    parent.reads += 1
                    if parent.reads % 3 == 0:
                        raise OSError("connection reset")
                    return body.read(min(n, 4096))

                def close(self):
                    body.close()

            return Body()

    bucket, key = uri.removeprefix("s3://").split("/", 1)
    flaky = Flaky(bucket, key, attempts=3, backoff_s=0.0)
    with io.BufferedReader(flaky, buffer_size=4096) as fh:
        assert fh.read() == want
    assert flaky.reads > 6  # it did drop and resume

    class Dead(S3Stream):
        def _open(self):
            raise OSError("connection refused")

    with pytest.raises(OSError, match="read at byte 0 failed 2 times"):
        Dead(bucket, key, attempts=2, backoff_s=0.0).read(10)


def test_sensor_discovers_segments_in_the_bucket(aws_env, instance):
    from orchestration.definitions import defs

    sensor = defs.resolve_sensor_def("new_crawl_segments")
    with dg.build_sensor_context(instance=instance, resources={"crawl_source": s3_source(aws_env)}) as ctx:
        result = sensor(ctx)
    assert sorted(k for r in result.dynamic_partitions_requests for k in r.partition_keys) == sorted(SAMPLE_KEYS)


def ingest(instance, source, keys) -> None:
    from orchestration.definitions import build_defs

    defs = build_defs()
    instance.add_dynamic_partitions("crawl_segments", list(keys))
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
    resources = {**defs.resources, "crawl_source": source}
    for key in keys:
        res = dg.materialize(
            assets, partition_key=key, instance=instance, resources=resources, selection=dg.AssetSelection.groups("raw")
        )
        assert res.success, key


def test_raw_ingest_from_s3_equals_local_ingest(aws_env, tmp_path, monkeypatch):
    """The tasks read through the source's own endpoint (AWS_ENDPOINT_URL unset), keys from the AWS chain."""
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    digests = {}
    for name, source in (("local", LocalCrawlSource(root=str(SAMPLE_CRAWL))), ("s3", s3_source(aws_env))):
        monkeypatch.setenv("TOKENLAKE_HOME", str(tmp_path / name))
        monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
        with dg.instance_for_test() as instance:
            ingest(instance, source, sorted(SAMPLE_KEYS))
        lakehouse = Lakehouse()
        digests[name] = {str(t): table_digest(lakehouse, t) for t in (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS)}
        files = set(lakehouse.scan(RAW_WARC_RECORDS, ("warc_file",))["warc_file"].to_pylist())
        assert all(f.startswith("s3://" if name == "s3" else "file://") for f in files), files
    assert digests["s3"] == digests["local"]
    assert digests["s3"][str(RAW_WARC_RECORDS)]["rows"] > 0


def test_an_s3_crawl_root_selects_the_s3_source(aws_env):
    """`TOKENLAKE_CRAWL_ROOT=s3://BUCKET/PREFIX` (and `tokenlake run --crawl-root s3://...`): the S3 source at
    the AWS chain's endpoint, listing what the local mirror lists."""
    source = crawl_source_for(f"s3://{aws_env.bucket}/{PREFIX}/")
    assert isinstance(source, S3CrawlSource) and (source.bucket, source.prefix) == (aws_env.bucket, PREFIX)
    assert source.list_segments() == LocalCrawlSource(root=str(SAMPLE_CRAWL)).list_segments()
    with pytest.raises(ValueError, match="names no bucket"):
        crawl_source_for("s3:///crawl")
