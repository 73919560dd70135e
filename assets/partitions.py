"""Partitions shared by the states: one per crawl segment (`<CRAWL>/<SEGMENT>`), one per tokenizer."""

import dagster as dg

# Added by the `new_crawl_segments` sensor; never one partition per document (Dagster advises <= 100k).
crawl_segments = dg.DynamicPartitionsDefinition(name="crawl_segments")

# One partition per named tokenizer (resource `tokenizer.paths`); tokenized data is tokenizer x segment.
tokenizers = dg.DynamicPartitionsDefinition(name="tokenizers")
tokenized_partitions = dg.MultiPartitionsDefinition({"tokenizer": tokenizers, "segment": crawl_segments})
