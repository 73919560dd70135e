"""Raw evidence: every WARC file of a crawl segment -> raw.warc_records + raw.rejected_records.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import json
import time
from datetime import UTC, datetime

import dagster as dg

from assets import shell
from assets.partitions import crawl_segments
from assets.raw import ingest
from assets.shell import config_from, md_table, params_from, provenance, run_tasks, table_key
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS, RAW_WARC_RECORDS
from resources import CrawlSource, IcebergCatalogResource, parse_partition_key
from resources.executor import TaskExecutorResource

WARC_RECORDS = table_key(RAW_WARC_RECORDS)
REJECTED_RECORDS = table_key(RAW_REJECTED_RECORDS)
ASSET_KEYS = (WARC_RECORDS, REJECTED_RECORDS)  # in the order of ingest.TABLES
CODE_VERSION = "raw-1"
RawIngestConfig = config_from(ingest.IngestParams, "RawIngestConfig")


@dg.multi_asset(
    name="raw_warc_ingest",
    specs=[
        shell.table_spec(
            RAW_WARC_RECORDS,
            ["record_id", "deletion_key"],
            code_version=CODE_VERSION,
            description="One row per WARC `response` record: payload bytes, origin, collection time, "
            "licence basis, deletion key. Iceberg table raw.warc_records.",
        ),
        shell.table_spec(
            RAW_REJECTED_RECORDS,
            ["record_id", "deletion_key"],
            code_version=CODE_VERSION,
            description="Everything in the WARC files that could not be read, with file, offset and "
            "reason. Iceberg table raw.rejected_records.",
        ),
    ],
    partitions_def=crawl_segments,
    pool="iceberg_raw",
    can_subset=False,
)
def raw_warc_ingest(
    context: dg.AssetExecutionContext,
    config: RawIngestConfig,
    catalog: IcebergCatalogResource,
    crawl_source: CrawlSource,
    executor: TaskExecutorResource,
):
    """Plan one task per WARC file of the segment, run them on the executor, commit both tables."""
    params, lakehouse = params_from(ingest.IngestParams, config), catalog.lakehouse()
    files = crawl_source.warc_files(parse_partition_key(context.partition_key))
    source = segment_source(context.partition_key, files, crawl_source.licence_basis, crawl_source.s3_endpoint)
    tasks = ingest.plan(lakehouse, source, params, context.run.run_id)
    t0 = time.perf_counter()
    results = run_tasks(context, executor.executor(), ingest.run_task, tasks)
    seconds = time.perf_counter() - t0  # reading, parsing, writing; the commit is not included
    hashed = {**params.hashed(), "licence_basis": source.licence_basis}
    extra = {"source-fingerprint": crawl_source.fingerprint(files)}
    prov = {t: provenance(context, k, hashed, {}, extra) for t, k in zip(ingest.TABLES, ASSET_KEYS)}
    commits = ingest.commit(lakehouse, source, results, prov)
    stats = ingest.SegmentStats.of(results)
    raw_rows = ingest_metadata(stats, commits[RAW_WARC_RECORDS], len(tasks), seconds)
    yield dg.MaterializeResult(asset_key=WARC_RECORDS, metadata=raw_rows)
    yield dg.MaterializeResult(
        asset_key=REJECTED_RECORDS, metadata=rejects_metadata(stats, commits[RAW_REJECTED_RECORDS])
    )


def segment_source(partition_key: str, files, licence_basis: str, s3_endpoint: str | None = None):
    """What the plan reads: the segment's WARC files in name order, stamped with the licence and the time."""
    ref = parse_partition_key(partition_key)
    uris = tuple(f.uri for f in files)
    return ingest.SegmentSource(ref.crawl, ref.segment, uris, licence_basis, datetime.now(UTC), s3_endpoint)


def rejects_metadata(stats: ingest.SegmentStats, commit) -> dict:
    """Rejects per reason of one segment."""
    return {
        "dagster/row_count": sum(stats.rejects.values()),
        **shell.commit_metadata(commit),
        "rejects_by_reason": md_table(["reason", "count"], sorted(stats.rejects.items())),
    }


def ingest_metadata(stats: ingest.SegmentStats, commit, tasks: int, seconds: float) -> dict:
    """Counts, rates and the per-file table of one segment's ingest."""
    per_file = [
        (
            f.warc_file.rsplit("/", 1)[-1],
            f.responses,
            sum(f.rejects.values()),
            ", ".join(f"{k}={v}" for k, v in sorted(f.records.items())),
            f"{f.bytes_read / 1e6:.2f}",
        )
        for f in stats.files
    ]
    seconds = max(seconds, 1e-9)
    return {
        "dagster/row_count": stats.rows,
        **shell.commit_metadata(commit),
        "iceberg_commit_attempts": commit.attempts,  # > 1: a concurrent commit won first and this one was retried
        "data_files": commit.files,
        "tasks": tasks,
        "warc_files": len(stats.files),
        "bytes_read": stats.bytes_read,
        "seconds": round(seconds, 3),
        "records_per_second": round(sum(stats.records.values()) / seconds, 1),
        "mb_per_second": round(stats.bytes_read / 1e6 / seconds, 2),
        "records_by_type": md_table(["WARC-Type", "records"], sorted(stats.records.items())),
        "files": md_table(["file", "responses stored", "rejects", "records by type", "MB"], per_file),
    }


raw_ingest_job = dg.define_asset_job(
    "raw_ingest",
    selection=dg.AssetSelection.groups("raw"),
    description="Ingest one crawl segment's WARC files into raw.warc_records / raw.rejected_records.",
)


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
def new_crawl_segments(context: dg.SensorEvaluationContext, crawl_source: CrawlSource):
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


defs = dg.Definitions(assets=[raw_warc_ingest], jobs=[raw_ingest_job], sensors=[new_crawl_segments])
