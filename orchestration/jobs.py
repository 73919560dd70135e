"""Asset jobs, one per state, so sensors and the Launchpad can target them."""

import dagster as dg

raw_ingest_job = dg.define_asset_job(
    "raw_ingest",
    selection=dg.AssetSelection.groups("raw"),
    description="Ingest one crawl segment's WARC files into raw.warc_records / raw.rejected_records.",
)

jobs = [raw_ingest_job]
