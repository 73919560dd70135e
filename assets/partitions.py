"""Partitions shared by the states: one per crawl segment (`<CRAWL>/<SEGMENT>`), per tokenizer, per benchmark."""

import warnings

import dagster as dg

# Added by the `new_crawl_segments` sensor; never one partition per document (Dagster advises <= 100k).
crawl_segments = dg.DynamicPartitionsDefinition(name="crawl_segments")

# One partition per named tokenizer (resource `tokenizer.paths`); tokenized data is tokenizer x segment.
tokenizers = dg.DynamicPartitionsDefinition(name="tokenizers")
tokenized_partitions = dg.MultiPartitionsDefinition({"tokenizer": tokenizers, "segment": crawl_segments})

# One partition per benchmark of the evaluation quarantine; matches are benchmark x segment, so adding a
# benchmark checks every segment already curated, and a new segment is checked against every benchmark.
benchmarks = dg.DynamicPartitionsDefinition(name="benchmarks")
quarantine_partitions = dg.MultiPartitionsDefinition({"benchmark": benchmarks, "segment": crawl_segments})


def dimension_dep(asset: dg.AssetKey, dimension: str) -> dg.AssetDep:
    """A dependency of a multi-partitioned asset on an asset partitioned like one of its dimensions.

    The mapping class is marked beta in Dagster 1.13 (it works and is tested here); its warning would be
    printed on every import of the definitions, so it is silenced at this one place."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.AssetDep(asset, partition_mapping=dg.MultiToSingleDimensionPartitionMapping(dimension))
