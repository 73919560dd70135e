"""Dagster resources: the Iceberg catalog, the crawl source, the models, the benchmarks, the asset graph."""

from resources.benchmarks import BenchmarkSourceConfig, EvalBenchmarksResource
from resources.catalog import IcebergCatalogResource
from resources.lineage import AssetGraphSource, lineage_resource
from resources.crawl_source import LocalCrawlSource, SegmentRef, WarcFileRef, parse_partition_key
from resources.models import DEFAULT_TOKENIZERS, LanguageModelResource, TokenizerResource, reference_lm_path

__all__ = [
    "AssetGraphSource",
    "lineage_resource",
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
