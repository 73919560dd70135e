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
    LocalCrawlSource,
    TaskExecutorResource,
    TokenizerResource,
    lineage_resource,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CRAWL = REPO_ROOT / "data" / "sample_crawl"
STATES = (raw, curated, dedup, tokenized, quarantine, run_view, governance)


def resources() -> dict[str, dg.ConfigurableResource | dg.ResourceDefinition]:
    """Default resources: the embedded catalog, the crawl directory from `TOKENLAKE_CRAWL_ROOT` (default: the
    sample crawl shipped in the repo), the KenLM model from `TOKENLAKE_LM_PATH` (default: curated/reference_lm),
    tasks in-process."""
    return {
        "catalog": IcebergCatalogResource(),
        "crawl_source": LocalCrawlSource(root=os.environ.get("TOKENLAKE_CRAWL_ROOT", str(SAMPLE_CRAWL))),
        "lm": LanguageModelResource(model_path=os.environ.get("TOKENLAKE_LM_PATH", "")),
        "tokenizer": TokenizerResource(),
        "benchmarks": EvalBenchmarksResource(),
        "executor": TaskExecutorResource(),
        "lineage": lineage_resource(lambda: defs),  # resolved at run time, when `defs` exists
    }


defs = dg.Definitions.merge(*(state.defs for state in STATES), dg.Definitions(resources=resources()))
