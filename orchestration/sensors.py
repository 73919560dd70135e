"""Sensors: discover new crawl snapshots/segments in the crawl source and start their ingest."""


import json

import dagster as dg

from assets.partitions import crawl_segments
from orchestration.jobs import raw_ingest_job
from resources import LocalCrawlSource


def new_segment_keys(discovered: list[str], cursor: str | None) -> tuple[list[str], str]:
    """The keys not yet seen according to the cursor, and the next cursor (a sorted JSON list)."""
    seen = set(json.loads(cursor)) if cursor else set()
    new = sorted(set(discovered) - seen)
    return new, json.dumps(sorted(seen | set(discovered)), separators=(",", ":"))


@dg.sensor(
    name="new_crawl_segments",
    job=raw_ingest_job,
    minimum_interval_seconds=60,
    description="Adds each new <CRAWL>/<SEGMENT> of the crawl source as a dynamic partition and requests "
                "its raw ingest. The cursor holds every key already seen, so a tick never repeats a request.",
)
def new_crawl_segments(context: dg.SensorEvaluationContext, crawl_source: LocalCrawlSource):
    discovered = [ref.partition_key for ref in crawl_source.list_segments()]
    new, cursor = new_segment_keys(discovered, context.cursor)
    if not new:
        return dg.SkipReason(f"no new segments ({len(discovered)} known)")
    context.log.info("new crawl segments: %s", new)
    existing = set(context.instance.get_dynamic_partitions(crawl_segments.name))
    to_add = [k for k in new if k not in existing]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=k, partition_key=k, tags={"tokenlake/segment": k}) for k in new],
        dynamic_partitions_requests=[crawl_segments.build_add_request(to_add)] if to_add else [],
        cursor=cursor,
    )


sensors = [new_crawl_segments]
