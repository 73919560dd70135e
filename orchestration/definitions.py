"""The one Definitions object (`dagster dev -w workspace.yaml`, `dagster definitions validate`): each state's
own Definitions (assets, checks, jobs, sensors side by side in `assets/<state>/defs.py`), merged, plus the
default resources."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from assets.curated import defs as curated
from assets.dedup import defs as dedup
from assets.governance import defs as governance
from assets.quarantine import defs as quarantine
from assets.raw import defs as raw
from assets.run_view import defs as run_view
from assets.tokenized import defs as tokenized
from resources import (
    EvalBenchmarksResource,
    IcebergCatalogResource,
    LanguageModelResource,
    TaskExecutorResource,
    TokenizerResource,
    crawl_source_for,
    lineage_resource,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CRAWL = REPO_ROOT / "data" / "sample_crawl"
STATES = (raw, curated, dedup, tokenized, quarantine, run_view, governance)


def resources(crawl_root: str | None = None) -> dict[str, dg.ConfigurableResource]:
    """Default resources: the embedded catalog, the crawl at `crawl_root` (a directory or `s3://BUCKET/PREFIX`;
    default `TOKENLAKE_CRAWL_ROOT`, else the sample crawl shipped in the repo), the KenLM model from
    `TOKENLAKE_LM_PATH` (default: curated/reference_lm), tasks in-process."""
    root = crawl_root or os.environ.get("TOKENLAKE_CRAWL_ROOT") or str(SAMPLE_CRAWL)
    return {
        "catalog": IcebergCatalogResource(),
        "crawl_source": crawl_source_for(root),
        "lm": LanguageModelResource(model_path=os.environ.get("TOKENLAKE_LM_PATH", "")),
        "tokenizer": TokenizerResource(),
        "benchmarks": EvalBenchmarksResource(),
        "executor": TaskExecutorResource(),
    }


def build_defs(crawl_root: str | None = None) -> dg.Definitions:
    """Every state's Definitions merged, with the default resources (and the crawl directory `crawl_root`)."""
    built: dg.Definitions | None = None
    lineage = lineage_resource(lambda: built)  # the graph deletion walks: this very Definitions, once built
    built = dg.Definitions.merge(
        *(state.defs for state in STATES), dg.Definitions(resources={**resources(crawl_root), "lineage": lineage})
    )
    return built


defs = build_defs()
