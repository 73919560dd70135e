"""Dagster ConfigurableResources: the Iceberg catalog and the crawl source (later: tokenizer, LID, LM)."""

from resources.catalog import IcebergCatalogResource
from resources.crawl_source import LocalCrawlSource, SegmentRef, WarcFileRef, parse_partition_key

__all__ = ["IcebergCatalogResource", "LocalCrawlSource", "SegmentRef", "WarcFileRef", "parse_partition_key"]
