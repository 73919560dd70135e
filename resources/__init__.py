"""Dagster ConfigurableResources: the Iceberg catalog, the crawl source, the perplexity model."""

from resources.benchmarks import BenchmarkSourceConfig, EvalBenchmarksResource
from resources.catalog import IcebergCatalogResource
from resources.crawl_source import LocalCrawlSource, SegmentRef, WarcFileRef, parse_partition_key
from resources.models import DEFAULT_TOKENIZERS, LanguageModelResource, TokenizerResource, reference_lm_path

__all__ = [
    "BenchmarkSourceConfig",
    "EvalBenchmarksResource",
    "DEFAULT_TOKENIZERS",
    "TokenizerResource",
    "IcebergCatalogResource",
    "LanguageModelResource",
    "LocalCrawlSource",
    "SegmentRef",
    "WarcFileRef",
    "parse_partition_key",
    "reference_lm_path",
]
