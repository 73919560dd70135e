"""Where WARC files come from: a directory or an S3 bucket laid out like Common Crawl's.

`<root>/crawl-data/<CRAWL>/segments/<SEGMENT>/warc/*.warc.gz` (`LocalCrawlSource`) or
`s3://<bucket>/<prefix>crawl-data/...` (`S3CrawlSource`, which also reads a crawl's `warc.paths.gz` list where
present). A source lists segments and their WARC files as URIs; raw ingest tasks open the URIs themselves
(`assets.raw.ingest.open_uri`), wherever they run.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import dagster as dg
from pydantic import Field

COMMON_CRAWL_TERMS = (
    "Common Crawl Terms of Use (https://commoncrawl.org/terms-of-use); robots.txt honoured at crawl time"
)


@dataclass(frozen=True, order=True)
class SegmentRef:
    crawl: str
    segment: str

    @property
    def partition_key(self) -> str:
        return f"{self.crawl}/{self.segment}"


@dataclass(frozen=True, order=True)
class WarcFileRef:
    uri: str  # stable identifier stored as raw.warc_records.warc_file
    size: int


def parse_partition_key(key: str) -> SegmentRef:
    """`CC-MAIN-2020-34/1596439738015.38` -> SegmentRef; a clear error for anything else."""
    crawl, sep, segment = key.partition("/")
    if not sep or not crawl or not segment or "/" in segment:
        raise ValueError(f"partition key {key!r} is not '<CRAWL>/<SEGMENT>' (e.g. 'CC-MAIN-2020-34/1596439738015.38')")
    return SegmentRef(crawl, segment)


class CrawlSource(dg.ConfigurableResource):
    """What raw ingest and the `new_crawl_segments` sensor need from a crawl: its segments, a segment's WARC
    files (URIs tasks can open wherever they run), a fingerprint of them, the licence basis, and the S3
    endpoint tasks read through (None: local files, or the AWS chain's). Never a secret: every process that
    runs tasks takes credentials from its own environment (the AWS chain: `AWS_ACCESS_KEY_ID`, `AWS_PROFILE`,
    an instance role)."""

    licence_basis: str = COMMON_CRAWL_TERMS
    file_glob: str = "*.warc.gz"

    # each source defines list_segments() -> [SegmentRef] and warc_files(SegmentRef) -> [WarcFileRef]

    def fingerprint(self, files: list[WarcFileRef]) -> str:
        """sha256 over the file names and sizes a partition was built from (recorded as provenance)."""
        return files_fingerprint(files)

    @property
    def s3_endpoint(self) -> str | None:
        return None


def crawl_source_for(root: str) -> CrawlSource:
    """`s3://BUCKET[/PREFIX]` -> `S3CrawlSource` (endpoint from `AWS_ENDPOINT_URL`), anything else a directory."""
    if root.startswith(("s3://", "s3a://")):
        bucket, _, prefix = root.split("://", 1)[1].partition("/")
        if not bucket:
            raise ValueError(f"crawl root {root!r} names no bucket (want s3://BUCKET[/PREFIX])")
        return S3CrawlSource(bucket=bucket, prefix=prefix.strip("/"), endpoint_url=os.environ.get("AWS_ENDPOINT_URL"))
    return LocalCrawlSource(root=root)


class LocalCrawlSource(CrawlSource):
    """A local directory mirroring Common Crawl's layout; `licence_basis` is stamped on every raw row."""

    root: str

    def _root(self) -> Path:
        root = Path(self.root).expanduser().resolve()
        if not (root / "crawl-data").is_dir():
            raise FileNotFoundError(f"crawl source root {str(root)!r} has no crawl-data/ directory")
        return root

    def list_segments(self) -> list[SegmentRef]:
        """Every crawl/segment pair that has a warc/ directory, sorted."""
        base = self._root() / "crawl-data"
        return sorted(
            SegmentRef(seg_dir.parent.parent.name, seg_dir.name)
            for seg_dir in base.glob("*/segments/*")
            if (seg_dir / "warc").is_dir()
        )

    def warc_files(self, ref: SegmentRef) -> list[WarcFileRef]:
        """The segment's WARC files in name order (the deterministic ingest order)."""
        warc_dir = self._root() / "crawl-data" / ref.crawl / "segments" / ref.segment / "warc"
        if not warc_dir.is_dir():
            raise FileNotFoundError(f"segment {ref.partition_key!r} not found: {str(warc_dir)!r} is not a directory")
        return [WarcFileRef(p.as_uri(), p.stat().st_size) for p in sorted(warc_dir.glob(self.file_glob)) if p.is_file()]


def files_fingerprint(files: list[WarcFileRef]) -> str:
    """sha256 over the file names and sizes (not the location: a local mirror and the bucket agree)."""
    listing = [(PurePosixPath(f.uri).name, f.size) for f in files]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


class S3CrawlSource(CrawlSource):
    """Common Crawl's layout in an S3 bucket (`s3://commoncrawl/crawl-data/CC-MAIN-.../segments/.../warc/`),
    through dagster-aws's `S3Resource` client. Segments come from each crawl's `warc.paths.gz` where present,
    else from listing `segments/`. Ingest tasks stream the `s3://` URIs (`assets.raw.ingest.open_uri`) through
    `endpoint_url`; credentials come from the standard AWS chain of the process that reads (listing here, each
    task on its node): a key in the resource would reach the listing but not the tasks, so there is none."""

    bucket: str = Field(default="commoncrawl", description="the bucket holding crawl-data/")
    prefix: str = Field(default="", description="key prefix before crawl-data/ (empty: the bucket root)")
    crawls: list[str] = Field(
        default_factory=list, description="only these crawls (e.g. CC-MAIN-2024-22); empty: every crawl"
    )
    endpoint_url: str | None = Field(default=None, description="S3 endpoint (None: AWS, or AWS_ENDPOINT_URL)")
    region_name: str | None = Field(default=None, description="S3 region (None: the AWS chain's)")
    max_attempts: int = Field(default=5, description="attempts per S3 request (retries with backoff)")

    @property
    def s3_endpoint(self) -> str | None:
        return self.endpoint_url

    def _client(self):
        from dagster_aws.s3 import S3Resource

        return S3Resource(
            endpoint_url=self.endpoint_url,
            region_name=self.region_name,
            max_attempts=self.max_attempts,
        ).get_client()

    def _base(self) -> str:
        return f"{self.prefix.strip('/')}/crawl-data/" if self.prefix.strip("/") else "crawl-data/"

    def _prefixes(self, client, prefix: str) -> list[str]:
        """The sub-"directories" right under `prefix` (names only)."""
        out = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
            out += [p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])]
        return out

    def _segments_of(self, client, crawl: str) -> set[str]:
        """A crawl's segments: from its `warc.paths.gz` when the bucket has one, else by listing."""
        from botocore.exceptions import ClientError

        base = f"{self._base()}{crawl}/"
        try:
            body = client.get_object(Bucket=self.bucket, Key=f"{base}warc.paths.gz")["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                raise
        else:
            lines = gzip.decompress(body).decode().split()
            return {line.split("/")[3] for line in lines if line.startswith(f"crawl-data/{crawl}/segments/")}
        return {
            seg
            for seg in self._prefixes(client, f"{base}segments/")
            if client.list_objects_v2(Bucket=self.bucket, Prefix=f"{base}segments/{seg}/warc/", MaxKeys=1).get(
                "KeyCount", 0
            )
        }

    def list_segments(self) -> list[SegmentRef]:
        """Every crawl/segment pair with WARC files (of `crawls`, when set), sorted."""
        client = self._client()
        crawls = self.crawls or self._prefixes(client, self._base())
        if not crawls:
            raise FileNotFoundError(f"crawl source s3://{self.bucket}/{self._base()} lists no crawl")
        return sorted(SegmentRef(c, seg) for c in crawls for seg in self._segments_of(client, c))

    def warc_files(self, ref: SegmentRef) -> list[WarcFileRef]:
        """The segment's WARC files in name order (the deterministic ingest order), sizes from the listing."""
        client = self._client()
        prefix = f"{self._base()}{ref.crawl}/segments/{ref.segment}/warc/"
        files = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix) :]
                if "/" not in name and fnmatch.fnmatch(name, self.file_glob):
                    files.append(WarcFileRef(f"s3://{self.bucket}/{obj['Key']}", int(obj["Size"])))
        if not files:
            raise FileNotFoundError(f"segment {ref.partition_key!r} not found: s3://{self.bucket}/{prefix} is empty")
        return sorted(files, key=lambda f: f.uri)
