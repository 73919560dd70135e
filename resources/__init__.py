"""Dagster ConfigurableResources: the Iceberg catalog, the crawl source, the perplexity model."""

from resources.catalog import IcebergCatalogResource
from resources.crawl_source import LocalCrawlSource, SegmentRef, WarcFileRef, parse_partition_key
from resources.models import LanguageModelResource, reference_lm_path

__all__ = [
    "IcebergCatalogResource",
    "LanguageModelResource",
    "LocalCrawlSource",
    "SegmentRef",
    "WarcFileRef",
    "parse_partition_key",
    "reference_lm_path",
]
