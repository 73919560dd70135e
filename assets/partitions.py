"""Partitions shared by every state: one Dagster partition per crawl segment (`<CRAWL>/<SEGMENT>`)."""

import dagster as dg

# Added by the `new_crawl_segments` sensor; never one partition per document (Dagster advises <= 100k).
crawl_segments = dg.DynamicPartitionsDefinition(name="crawl_segments")
