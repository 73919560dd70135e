"""Where WARC files come from: a directory laid out like Common Crawl's bucket.

`<root>/crawl-data/<CRAWL>/segments/<SEGMENT>/warc/*.warc.gz`. A source lists segments and their WARC files
as URIs; raw ingest tasks open the URIs themselves (`assets.raw.ingest.open_uri`), wherever they run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

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


class LocalCrawlSource(dg.ConfigurableResource):
    """A local directory mirroring Common Crawl's layout; `licence_basis` is stamped on every raw row."""

    root: str
    licence_basis: str = COMMON_CRAWL_TERMS
    file_glob: str = "*.warc.gz"

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

    def fingerprint(self, files: list[WarcFileRef]) -> str:
        """sha256 over the file names and sizes a partition was built from (recorded as provenance)."""
        listing = [(Path(f.uri).name, f.size) for f in files]
        return hashlib.sha256(json.dumps(listing).encode()).hexdigest()
