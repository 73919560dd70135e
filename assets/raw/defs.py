"""Raw evidence asset: every WARC file of a crawl segment -> raw.warc_records + raw.rejected_records.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

from datetime import datetime, timezone

import dagster as dg

from assets.governance.propagate import erasure
from assets.lakehouse import md_table, provenance
from assets.partitions import crawl_segments
from assets.raw.ingest import ingest_segment
from assets.raw.warc_reader import DEFAULT_MAX_RECORD_BYTES, ReadContext
from resources import IcebergCatalogResource, LocalCrawlSource, parse_partition_key

WARC_RECORDS = dg.AssetKey(["raw", "warc_records"])
REJECTED_RECORDS = dg.AssetKey(["raw", "rejected_records"])
CODE_VERSION = "raw-1"


class RawIngestConfig(dg.Config):
    """Knobs of the raw ingest; only `max_record_bytes` changes what is stored."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    batch_bytes: int = 8 << 20
    batch_rows: int = 10_000


@dg.multi_asset(
    name="raw_warc_ingest",
    specs=[
        dg.AssetSpec(WARC_RECORDS, code_version=CODE_VERSION, kinds={"iceberg"}, group_name="raw",
                     description="One row per WARC `response` record: payload bytes, origin, collection time, "
                                 "licence basis, deletion key. Iceberg table raw.warc_records.",
                     metadata={"iceberg_table": "raw.warc_records",
                               **erasure(("raw.warc_records", ["record_id", "deletion_key"]))}),
        dg.AssetSpec(REJECTED_RECORDS, code_version=CODE_VERSION, kinds={"iceberg"}, group_name="raw",
                     description="Everything in the WARC files that could not be read, with file, offset and "
                                 "reason. Iceberg table raw.rejected_records.",
                     metadata={"iceberg_table": "raw.rejected_records",
                               **erasure(("raw.rejected_records", ["record_id", "deletion_key"]))}),
    ],
    partitions_def=crawl_segments,
    pool="iceberg_raw",
    can_subset=False,
)
def raw_warc_ingest(
    context: dg.AssetExecutionContext,
    config: RawIngestConfig,
    catalog: IcebergCatalogResource,
    crawl_source: LocalCrawlSource,
):
    ref = parse_partition_key(context.partition_key)
    files = crawl_source.warc_files(ref)
    if not files:
        context.log.warning("segment %s has no WARC files", ref.partition_key)
    context.log.info("ingesting %d WARC files (%.1f MB) of %s", len(files), sum(f.size for f in files) / 1e6,
                     ref.partition_key)
    partition = {"crawl": ref.crawl, "segment": ref.segment}
    rows_writer = catalog.partition_writer("raw.warc_records", partition)
    rejects_writer = catalog.partition_writer("raw.rejected_records", partition)
    by_uri = {f.uri: f for f in files}
    stats = ingest_segment(
        [f.uri for f in files],
        lambda uri: crawl_source.open(by_uri[uri]),
        ReadContext(ref.crawl, ref.segment, crawl_source.licence_basis, datetime.now(timezone.utc)),
        rows_writer,
        rejects_writer,
        batch_bytes=config.batch_bytes,
        batch_rows=config.batch_rows,
        max_record_bytes=config.max_record_bytes,
        log=context.log,
    )
    hashed = {"max_record_bytes": config.max_record_bytes, "licence_basis": crawl_source.licence_basis}
    extra = {"source-fingerprint": crawl_source.fingerprint(files)}
    rows_commit = rows_writer.commit(provenance(context, WARC_RECORDS, hashed, {}, extra))
    rejects_commit = rejects_writer.commit(provenance(context, REJECTED_RECORDS, hashed, {}, extra))

    per_file = [
        (f.warc_file.rsplit("/", 1)[-1], f.responses, sum(f.rejects.values()),
         ", ".join(f"{k}={v}" for k, v in sorted(f.records.items())), f"{f.bytes_read / 1e6:.2f}")
        for f in stats.files
    ]
    seconds = max(stats.seconds, 1e-9)
    yield dg.MaterializeResult(
        asset_key=WARC_RECORDS,
        metadata={
            "dagster/row_count": stats.rows,
            "iceberg_snapshot_id": str(rows_commit.snapshot_id),
            "data_files": rows_commit.files,
            "warc_files": len(files),
            "bytes_read": stats.bytes_read,
            "seconds": round(stats.seconds, 3),
            "records_per_second": round(sum(stats.records.values()) / seconds, 1),
            "mb_per_second": round(stats.bytes_read / 1e6 / seconds, 2),
            "records_by_type": md_table(["WARC-Type", "records"], sorted(stats.records.items())),
            "files": md_table(["file", "responses stored", "rejects", "records by type", "MB"], per_file),
        },
    )
    yield dg.MaterializeResult(
        asset_key=REJECTED_RECORDS,
        metadata={
            "dagster/row_count": sum(stats.rejects.values()),
            "iceberg_snapshot_id": str(rejects_commit.snapshot_id),
            "rejects_by_reason": md_table(["reason", "count"], sorted(stats.rejects.items())),
        },
    )


assets = [raw_warc_ingest]
