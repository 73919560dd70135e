"""The one Definitions object (`dagster dev -w workspace.yaml`, `dagster definitions validate`)."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from assets.curated import defs as curated_defs
from assets.dedup import defs as dedup_defs
from assets.governance import defs as governance_defs
from assets.quarantine import defs as quarantine_defs
from assets.raw import defs as raw_defs
from assets.run_view import defs as run_view_defs
from assets.tokenized import defs as tokenized_defs
from orchestration.jobs import jobs
from orchestration.sensors import sensors
from resources import (
    EvalBenchmarksResource,
    IcebergCatalogResource,
    LanguageModelResource,
    LocalCrawlSource,
    TokenizerResource,
    lineage_resource,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CRAWL = REPO_ROOT / "data" / "sample_crawl"


def resources() -> dict[str, dg.ConfigurableResource | dg.ResourceDefinition]:
    """Default resources: the embedded catalog, the crawl directory from `TOKENLAKE_CRAWL_ROOT` (default: the
    sample crawl shipped in the repo), the KenLM model from `TOKENLAKE_LM_PATH` (default: curated/reference_lm)."""
    return {
        "catalog": IcebergCatalogResource(),
        "crawl_source": LocalCrawlSource(root=os.environ.get("TOKENLAKE_CRAWL_ROOT", str(SAMPLE_CRAWL))),
        "lm": LanguageModelResource(model_path=os.environ.get("TOKENLAKE_LM_PATH", "")),
        "tokenizer": TokenizerResource(),
        "benchmarks": EvalBenchmarksResource(),
        "lineage": lineage_resource(lambda: defs),  # resolved at run time, when `defs` exists
    }


defs = dg.Definitions(
    assets=[*raw_defs.assets, *curated_defs.assets, *dedup_defs.assets, *tokenized_defs.assets,
            *quarantine_defs.assets, *run_view_defs.assets],
    asset_checks=[*curated_defs.asset_checks, *tokenized_defs.asset_checks, *run_view_defs.asset_checks],
    jobs=[*jobs, *run_view_defs.jobs, *governance_defs.jobs],
    sensors=sensors,
    resources=resources(),
)
