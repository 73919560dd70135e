"""Dagster resources: the Iceberg catalog, the task executor, the crawl source, the models, the benchmarks,
the asset graph."""

from resources.benchmarks import BenchmarkSourceConfig, EvalBenchmarksResource
from resources.catalog import IcebergCatalogResource
from resources.crawl_source import (
    CrawlSource,
    LocalCrawlSource,
    S3CrawlSource,
    SegmentRef,
    WarcFileRef,
    crawl_source_for,
    parse_partition_key,
)
from resources.executor import InProcessExecutor, TaskExecutor, TaskExecutorResource
from resources.lineage import AssetGraphSource, lineage_resource
from resources.models import DEFAULT_TOKENIZERS, LanguageModelResource, TokenizerResource, reference_lm_path

__all__ = [
    "AssetGraphSource",
    "lineage_resource",
    "BenchmarkSourceConfig",
    "EvalBenchmarksResource",
    "DEFAULT_TOKENIZERS",
    "TokenizerResource",
    "IcebergCatalogResource",
    "InProcessExecutor",
    "TaskExecutor",
    "TaskExecutorResource",
    "LanguageModelResource",
    "CrawlSource",
    "crawl_source_for",
    "LocalCrawlSource",
    "S3CrawlSource",
    "SegmentRef",
    "WarcFileRef",
    "parse_partition_key",
    "reference_lm_path",
]
