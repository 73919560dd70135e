"""Which evaluation sets the quarantine holds: the shipped ones plus any configured here (configuration only;
assets/quarantine reads the files)."""

from __future__ import annotations

import typing

import dagster as dg
from pydantic import Field


class BenchmarkSourceConfig(dg.Config):
    """A benchmark file: `format` jsonl | jsonl.gz | csv | parquet; `fields` are joined into the item text."""

    name: str
    path: str
    format: str = "jsonl"
    split: str = "test"
    fields: list[str] = Field(default_factory=list)
    id_field: typing.Optional[str] = None


class EvalBenchmarksResource(dg.ConfigurableResource):
    """Benchmarks beyond the shipped GSM8K, HumanEval and MMLU-Redux (data/benchmarks/). A name is a partition
    key of the `benchmarks` dimension."""

    extra: list[BenchmarkSourceConfig] = Field(default_factory=list)
