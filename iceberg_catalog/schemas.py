"""Every Iceberg table of tokenlake, declared once with explicit field ids and partition specs.

A schema change is a reviewed diff of this file; nothing infers a schema from a DataFrame. Field ids are
stable forever: add new fields with new ids, never renumber.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

# One namespace per state (DESIGN.md): created up front so every later asset can assume them.
NAMESPACES: tuple[str, ...] = ("raw", "curated", "tokenized", "quarantine", "run_view", "governance")

# Partition fields get ids from 1000 up, as Iceberg does by convention.
_PARTITION_ID_BASE = 1000


@dataclass(frozen=True)
class TableDef:
    """One table: identifier, schema, identity-partition source columns and table properties."""

    namespace: str
    name: str
    schema: Schema
    partition_by: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def partition_spec(self) -> PartitionSpec:
        fields = []
        for i, column in enumerate(self.partition_by):
            source = self.schema.find_field(column)
            fields.append(PartitionField(source.field_id, _PARTITION_ID_BASE + i, IdentityTransform(), column))
        return PartitionSpec(*fields)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema (with Parquet field ids) that data files of this table are written with."""
        return schema_to_pyarrow(self.schema)


def _fields(*spec: tuple[int, str, object, bool]) -> Schema:
    return Schema(*(NestedField(fid, name, typ, required=req) for fid, name, typ, req in spec))


# Lineage keys (record_id, deletion_key, crawl, segment) come first in every table that carries them.
RAW_WARC_RECORDS = TableDef(
    "raw",
    "warc_records",
    _fields(
        (1, "record_id", StringType(), True),  # WARC-Record-ID
        (2, "deletion_key", StringType(), True),  # sha256 of the normalised target URI
        (3, "crawl", StringType(), True),
        (4, "segment", StringType(), True),
        (5, "target_uri", StringType(), True),
        (6, "host", StringType(), False),
        (7, "warc_date", TimestamptzType(), False),  # collection time
        (8, "http_status", IntegerType(), False),
        (9, "content_type", StringType(), False),  # HTTP Content-Type (with charset) or the WARC one
        (10, "payload", BinaryType(), True),  # HTTP entity body exactly as stored in the WARC
        (11, "payload_length", LongType(), True),
        (12, "payload_sha1", StringType(), True),  # "sha1:<BASE32>", the WARC-Payload-Digest format
        (13, "payload_digest_declared", StringType(), False),
        (14, "payload_digest_verified", BooleanType(), False),  # null when the WARC declares none
        (15, "warc_file", StringType(), True),  # source WARC URI
        (16, "warc_offset", LongType(), True),  # byte offset of the record's gzip member
        (17, "warc_length", LongType(), True),  # compressed length of that member
        (18, "warc_version", StringType(), True),
        (19, "licence_basis", StringType(), True),
        (20, "ingested_at", TimestamptzType(), True),
    ),
    partition_by=("crawl", "segment"),
)

RAW_REJECTED_RECORDS = TableDef(
    "raw",
    "rejected_records",
    _fields(
        (1, "crawl", StringType(), True),
        (2, "segment", StringType(), True),
        (3, "warc_file", StringType(), True),
        (4, "warc_offset", LongType(), True),
        (5, "warc_length", LongType(), False),  # bytes the reject covers, when known
        (6, "reason", StringType(), True),  # stable reason string, e.g. truncated_gzip_member
        (7, "detail", StringType(), False),  # the parser's message
        (8, "record_id", StringType(), False),
        (9, "record_type", StringType(), False),
        (10, "target_uri", StringType(), False),
        (11, "deletion_key", StringType(), False),
        (12, "ingested_at", TimestamptzType(), True),
    ),
    partition_by=("crawl", "segment"),
)

TABLES: dict[str, TableDef] = {t.identifier: t for t in (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS)}
