"""Sensors: new crawl segments start their ingest; new deletion requests start their propagation; run views
superseded by a deletion get a rebuilt candidate (which then waits for a reviewer)."""


import json

import dagster as dg

from assets.governance.propagate import superseded_without_successor
from assets.governance.requests import list_requests
from assets.partitions import crawl_segments
from orchestration.jobs import raw_ingest_job, run_view_candidate_job
from resources import IcebergCatalogResource, LocalCrawlSource


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


@dg.sensor(
    name="deletion_requests",
    job_name="propagate_deletion",  # by name: binding the op job object would re-create the sensor (beta warning)
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Starts propagate_deletion for every pending request in governance.deletion_requests (run key = "
                "request id, so each request is propagated once).",
)
def deletion_requests(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    pending = [r["request_id"] for r in list_requests(catalog.catalog(), status="pending")]
    if not pending:
        return dg.SkipReason("no pending deletion request")
    return [dg.RunRequest(run_key=rid, tags={"tokenlake/deletion-request": rid},
                          run_config={"ops": {"propagate": {"config": {"request_id": rid}}}})
            for rid in pending]


@dg.sensor(
    name="superseded_run_views",
    job=run_view_candidate_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="For each published run view superseded by a deletion, builds a new candidate with the same "
                "config on the current inputs (rebuild_of); it is published only after a reviewer approves it.",
)
def superseded_run_views(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    todo = superseded_without_successor(catalog.catalog())
    if not todo:
        return dg.SkipReason("no superseded run view without a successor")
    return [dg.RunRequest(run_key=f"rebuild-{rv}", tags={"tokenlake/rebuild-of": rv},
                          run_config={"ops": {"run_view__candidate": {"config": {"rebuild_of": rv}}}})
            for rv in todo]


sensors = [new_crawl_segments, deletion_requests, superseded_run_views]
