"""Every Iceberg table of tokenlake, declared once with explicit field ids and partition specs.

A schema change is a reviewed diff of this file; nothing infers a schema from a DataFrame. Field ids are
1..N in column order: pyiceberg's create_table assigns ids in that order, so declaring them the same way
keeps the declaration, the catalog and the Parquet files in agreement (`ensure_tables` checks it). A new
column gets the next id at the end; ids are never reused or renumbered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from iceberg_catalog import run_view_contract as contract

# One namespace per state, named as its assets/ folder, Dagster group and pool (DESIGN.md): created up
# front so every later asset can assume them.
NAMESPACES: tuple[str, ...] = ("raw", "curated", "dedup", "tokenized", "quarantine", "run_view", "governance")

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

    def __post_init__(self) -> None:
        ids = [f.field_id for f in self.schema.fields]
        if ids != list(range(1, len(ids) + 1)):
            raise ValueError(f"{self.namespace}.{self.name}: field ids must be 1..N in column order, got {ids}")

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"

    def __hash__(self) -> int:  # usable as a mapping key: a table is its identifier
        return hash(self.identifier)

    def __str__(self) -> str:
        return self.identifier

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
        from pyiceberg.io.pyarrow import schema_to_pyarrow  # here: it imports pyarrow.dataset, hence pandas

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

# One row per HTML response record. Signals are columns and the decision is derived from them, so a corpus
# can be re-thresholded without recomputing. `text` is normalised and PII-redacted: unredacted text is never
# written here.
CURATED_DOCUMENTS = TableDef(
    "curated",
    "documents",
    _fields(
        (1, "doc_id", StringType(), True),  # sha256(record_id, payload_sha1)[:32]: stable, content-addressed
        (2, "record_id", StringType(), True),
        (3, "deletion_key", StringType(), True),
        (4, "crawl", StringType(), True),
        (5, "segment", StringType(), True),
        (6, "url", StringType(), True),
        (7, "host", StringType(), False),
        (8, "warc_date", TimestamptzType(), False),
        (9, "decision", StringType(), False),  # first failing rule (stable reason string); null = kept
        (10, "kept", BooleanType(), True),
        (11, "decision_detail", StringType(), False),
        (12, "text", StringType(), False),
        (13, "text_sha256", StringType(), False),  # exact-dedup key over the stored text
        (14, "n_chars", LongType(), False),
        (15, "extract_seconds", DoubleType(), False),
        (16, "language", StringType(), False),
        (17, "language_score", DoubleType(), False),
        (18, "lm_log10_prob_per_word", DoubleType(), False),
        (19, "perplexity", DoubleType(), False),
        (20, "lm_n_words", LongType(), False),
        (21, "ppl_bucket", StringType(), False),  # head / middle / tail per language within the partition
        (22, "http_status", IntegerType(), False),
        (23, "content_type", StringType(), False),
        (24, "pii_email_count", IntegerType(), False),
        (25, "pii_ip_address_count", IntegerType(), False),
        (26, "pii_phone_count", IntegerType(), False),
        (27, "pii_payment_card_count", IntegerType(), False),
        (28, "pii_iban_count", IntegerType(), False),
        (29, "pii_aws_key_count", IntegerType(), False),
        (30, "pii_github_token_count", IntegerType(), False),
        (31, "pii_gitlab_token_count", IntegerType(), False),
        (32, "pii_slack_token_count", IntegerType(), False),
        (33, "pii_private_key_count", IntegerType(), False),
        (34, "pii_jwt_count", IntegerType(), False),
        (35, "pii_generic_secret_count", IntegerType(), False),
        (36, "gopher_rep_n_paragraphs", LongType(), False),
        (37, "gopher_rep_dup_para_frac", DoubleType(), False),
        (38, "gopher_rep_dup_para_char_frac", DoubleType(), False),
        (39, "gopher_rep_n_lines", LongType(), False),
        (40, "gopher_rep_dup_line_frac", DoubleType(), False),
        (41, "gopher_rep_dup_line_char_frac", DoubleType(), False),
        (42, "gopher_rep_top_2gram_char_frac", DoubleType(), False),
        (43, "gopher_rep_top_3gram_char_frac", DoubleType(), False),
        (44, "gopher_rep_top_4gram_char_frac", DoubleType(), False),
        (45, "gopher_rep_dup_5gram_char_frac", DoubleType(), False),
        (46, "gopher_rep_dup_6gram_char_frac", DoubleType(), False),
        (47, "gopher_rep_dup_7gram_char_frac", DoubleType(), False),
        (48, "gopher_rep_dup_8gram_char_frac", DoubleType(), False),
        (49, "gopher_rep_dup_9gram_char_frac", DoubleType(), False),
        (50, "gopher_rep_dup_10gram_char_frac", DoubleType(), False),
        (51, "gopher_n_tokens", LongType(), False),
        (52, "gopher_n_words", LongType(), False),
        (53, "gopher_mean_word_len", DoubleType(), False),
        (54, "gopher_hash_ratio", DoubleType(), False),
        (55, "gopher_ellipsis_ratio", DoubleType(), False),
        (56, "gopher_n_lines", LongType(), False),
        (57, "gopher_bullet_line_frac", DoubleType(), False),
        (58, "gopher_ellipsis_line_frac", DoubleType(), False),
        (59, "gopher_alpha_token_frac", DoubleType(), False),
        (60, "gopher_n_stop_words", LongType(), False),
        (61, "c4_n_lines", LongType(), False),
        (62, "c4_max_word_len", LongType(), False),
        (63, "c4_n_lines_long_word", LongType(), False),
        (64, "c4_n_lines_too_few_words", LongType(), False),
        (65, "c4_n_lines_no_terminal_punct", LongType(), False),
        (66, "c4_n_lines_lorem_ipsum", LongType(), False),
        (67, "c4_n_lines_javascript", LongType(), False),
        (68, "c4_n_lines_curly_bracket", LongType(), False),
        (69, "c4_n_lines_policy", LongType(), False),
        (70, "c4_n_lines_kept", LongType(), False),
        (71, "c4_n_sentences", LongType(), False),
        (72, "c4_n_lines_lorem_ipsum_terminal", LongType(), False),
        (73, "c4_n_lines_curly_bracket_terminal", LongType(), False),
        (74, "c4_n_sentences_terminal", LongType(), False),
        (75, "fineweb_n_lines", LongType(), False),
        (76, "fineweb_line_punct_ratio", DoubleType(), False),
        (77, "fineweb_short_line_ratio", DoubleType(), False),
        (78, "fineweb_char_dup_ratio", DoubleType(), False),
        (79, "fineweb_newline_ratio", DoubleType(), False),
        # the language whose rules judged the document: en (English Gopher/C4/FineWeb), a FineWeb-2 language,
        # or `default` (assets/curated/language_rules.py); null when there is no text
        (80, "quality_rules", StringType(), False),
        # the domain/topic classifier (assets/curated/domain.py): code | commerce | encyclopedic | forum/qa | news |
        # other | unknown (top probability under the model's threshold), and that top probability; null without text
        (81, "domain_class", StringType(), False),
        (82, "domain_confidence", DoubleType(), False),
    ),
    partition_by=("crawl", "segment"),
)

# Exact duplicates across ALL materialised partitions: every kept document whose text hash was seen first
# (order: crawl, then doc_id) in another document, partitioned by the duplicate's crawl. Its rows depend only
# on the crawls up to its own, so a run rebuilds the crawls from the first changed one on and leaves the
# earlier ones as they are; it does not depend on the order partitions were materialised in.
CURATED_EXACT_DUPLICATES = TableDef(
    "curated",
    "exact_duplicates",
    _fields(
        (1, "doc_id", StringType(), True),
        (2, "crawl", StringType(), True),
        (3, "segment", StringType(), True),
        (4, "decision", StringType(), True),  # always "exact_duplicate"
        (5, "duplicate_of", StringType(), True),  # the canonical doc_id
        (6, "duplicate_of_crawl", StringType(), True),
        (7, "text_sha256", StringType(), True),
    ),
    partition_by=("crawl",),
)

# Per-language precision/recall of the language identifier on the labelled set shipped in data/langid/.
CURATED_LANGID_VALIDATION = TableDef(
    "curated",
    "langid_validation",
    _fields(
        (1, "language", StringType(), True),  # ISO code, or "macro" for the macro average
        (2, "n", LongType(), True),
        (3, "precision", DoubleType(), True),
        (4, "recall", DoubleType(), True),
        (5, "f1", DoubleType(), True),
        (6, "unknown_share", DoubleType(), True),  # predicted under the threshold
        (7, "threshold", DoubleType(), True),
        (8, "model", StringType(), True),
    ),
)

# MinHash LSH index of kept documents: one row per (document, band), written as one row group per band per
# batch (sorted by band_hash), so a band scan skips other bands by row-group statistics. Signatures are kept
# apart, read only to verify candidate pairs.
DEDUP_MINHASH_BANDS = TableDef(
    "dedup",
    "minhash_bands",
    _fields(
        (1, "doc_id", StringType(), True),
        (2, "crawl", StringType(), True),
        (3, "segment", StringType(), True),
        (4, "band", IntegerType(), True),
        (5, "band_hash", LongType(), True),
    ),
    partition_by=("crawl", "segment"),
)

DEDUP_MINHASH_SIGNATURES = TableDef(
    "dedup",
    "minhash_signatures",
    _fields(
        (1, "doc_id", StringType(), True),
        (2, "crawl", StringType(), True),
        (3, "segment", StringType(), True),
        (4, "signature", BinaryType(), True),  # bands*rows MinHash values, assets.dedup.minhash.signature_to_bytes
    ),
    partition_by=("crawl", "segment"),
)

# Near-duplicate clusters across ALL materialised partitions: every document in a cluster of size > 1.
# The canonical document (earliest crawl, then doc_id) has decision null; the others `near_duplicate`.
DEDUP_NEAR_DUPLICATES = TableDef(
    "dedup",
    "near_duplicates",
    _fields(
        (1, "doc_id", StringType(), True),
        (2, "crawl", StringType(), True),
        (3, "segment", StringType(), True),
        (4, "decision", StringType(), False),  # "near_duplicate", or null for the cluster's canonical document
        (5, "cluster_id", StringType(), True),  # doc_id of the canonical document
        (6, "cluster_size", IntegerType(), True),  # kept for duplicate-aware up-weighting (FineWeb-2)
        (7, "duplicate_of", StringType(), False),
        (8, "cluster_crawl", StringType(), False),  # crawl of the canonical document
    ),
    partition_by=("crawl",),
)

# Each kept English document's embedding, computed once per segment (assets/dedup/embeddings_table.py): the
# model's id and the sha256 of its weights on every row, so a changed model is a new version of the rows, never
# a silent change of the links and splits built from them.
DEDUP_EMBEDDINGS = TableDef(
    "dedup",
    "embeddings",
    _fields(
        (1, "doc_id", StringType(), True),
        (2, "crawl", StringType(), True),
        (3, "segment", StringType(), True),
        (4, "model", StringType(), True),  # assets.embeddings.EMBEDDING_MODEL
        (5, "model_sha256", StringType(), True),  # sha256 of the model's embedding table (its weights)
        (6, "vector", BinaryType(), True),  # L2-normalised, float16 little-endian, dim * 2 bytes
    ),
    partition_by=("crawl", "segment"),
)

# k-means centroids of the embeddings, fitted once on a seeded sample and kept by version: the buckets within
# which semantic links are sought (assets/dedup/semantic_links.py). One row per centroid.
DEDUP_SEMANTIC_CENTROIDS = TableDef(
    "dedup",
    "semantic_centroids",
    _fields(
        (1, "centroid_version", StringType(), True),  # sha256 of the model, the fit's settings and the vectors
        (2, "model_sha256", StringType(), True),
        (3, "centroid", IntegerType(), True),
        (4, "vector", BinaryType(), True),  # float32 little-endian, dim * 4 bytes
        (5, "sample_docs", LongType(), True),  # documents the centroids were fitted on
        (6, "seed", LongType(), True),
    ),
    partition_by=("centroid_version",),  # a refit adds a version; the versions in use are never rewritten
)

# Semantic links found when a crawl was added: pairs whose later document (doc_id) is in `crawl`, the other in
# the same or an earlier crawl, with the cosine of their stored vectors at or above `threshold`.
DEDUP_SEMANTIC_LINKS = TableDef(
    "dedup",
    "semantic_links",
    _fields(
        (1, "doc_id", StringType(), True),
        (2, "crawl", StringType(), True),
        (3, "linked_doc_id", StringType(), True),
        (4, "linked_crawl", StringType(), True),
        (5, "cosine", DoubleType(), True),  # from the two stored vectors alone (float64)
        (6, "threshold", DoubleType(), True),
        (7, "model_sha256", StringType(), True),
        (8, "centroid_version", StringType(), True),
    ),
    partition_by=("crawl",),
)

# Each kept document's split cluster and split, committed crawl by crawl in crawl order (an earlier crawl's rows
# are never recomputed): assets/dedup/split_assignments.py.
DEDUP_SPLIT_ASSIGNMENTS = TableDef(
    "dedup",
    "split_assignments",
    _fields(
        (1, "doc_id", StringType(), True),
        (2, "crawl", StringType(), True),
        (3, "segment", StringType(), True),
        (4, "duplicate_cluster_id", StringType(), True),  # near/exact-duplicate cluster (splits.cluster_ids)
        (5, "split_cluster_id", StringType(), True),
        (6, "split", StringType(), True),  # under `split_params`; a view with other fractions re-derives it
        (7, "split_params", StringType(), True),  # JSON of SplitParams.as_dict()
        (8, "rule", StringType(), True),  # JSON: threshold, mutual top-k, cap, model and centroid versions
    ),
    partition_by=("crawl",),
)

# The tokenizer as data: the exact tokenizer.json is recoverable from the lakehouse by its id.
TOKENIZED_TOKENIZERS = TableDef(
    "tokenized",
    "tokenizers",
    _fields(
        (1, "tokenizer_id", StringType(), True),  # sha256 of the canonical tokenizer.json
        (2, "name", StringType(), True),
        (3, "vocab_size", IntegerType(), True),
        (4, "eos_id", IntegerType(), True),
        (5, "bos_id", IntegerType(), False),
        (6, "token_dtype", StringType(), True),  # uint16 | uint32, little-endian
        (7, "tokenizer_json", StringType(), True),
    ),
    partition_by=("tokenizer_id",),
)

# Kept documents as token arrays (EOS appended), one row per document, in the curated partition's order.
# Data files are written in row groups of `docs_per_row_group` documents (assets/tokenized/README.md).
TOKENIZED_DOCUMENTS = TableDef(
    *contract.TOKENS_TABLE.split("."),
    _fields(
        (1, "tokenizer_id", StringType(), True),
        (2, "doc_id", StringType(), True),
        (3, "record_id", StringType(), True),
        (4, "deletion_key", StringType(), True),
        (5, "crawl", StringType(), True),
        (6, "segment", StringType(), True),
        (7, "tokens", BinaryType(), True),
        (8, "token_dtype", StringType(), True),
        (9, "n_tokens", IntegerType(), True),  # including the final EOS
        (10, "tokens_sha256", StringType(), True),
        (11, "language", StringType(), False),  # mixture labels
        (12, "ppl_bucket", StringType(), False),
        (13, "host", StringType(), False),
        (14, "domain_class", StringType(), False),  # curated.documents' classifier label and its confidence
        (15, "domain_confidence", DoubleType(), False),
    ),
    partition_by=("tokenizer_id", "crawl", "segment"),
    # the loader decodes every token array it serves: plain and uncompressed (iceberg_catalog.commit.parquet_options)
    properties={"tokenlake.parquet.raw-columns": "tokens"},
)

# Evaluation material as data: one row per benchmark item, partitioned by benchmark.
QUARANTINE_EVAL_ITEMS = TableDef(
    "quarantine",
    "eval_items",
    _fields(
        (1, "benchmark", StringType(), True),
        (2, "split", StringType(), True),
        (3, "item_id", StringType(), True),
        (4, "text", StringType(), True),  # built per benchmark from its fields (question, choices, answer, ...)
        (5, "n_words", IntegerType(), True),
    ),
    partition_by=("benchmark",),
)

# Benchmarks a user added (`tokenlake benchmark add`): the file itself, content-hashed, and how to read it; one
# partition per benchmark name, replaced when the name is added again. A table, not loose files, so it works on
# every catalog and object store (an S3 Tables warehouse takes no object outside a table).
QUARANTINE_BENCHMARK_SOURCES = TableDef(
    "quarantine",
    "benchmark_sources",
    _fields(
        (1, "name", StringType(), True),
        (2, "format", StringType(), True),  # jsonl | csv | parquet
        (3, "split", StringType(), True),
        (4, "text_fields", StringType(), True),  # JSON list
        (5, "sha256", StringType(), True),  # of `data`
        (6, "items", LongType(), True),
        (7, "original", StringType(), True),  # where it was added from (for the record only)
        (8, "added_at", StringType(), True),
        (9, "data", BinaryType(), True),
    ),
    partition_by=("name",),
)

# Every kept curated document that contains (part of) an eval item: the document's decision is
# `eval_contaminated`; run views exclude these documents.
QUARANTINE_MATCHES = TableDef(
    "quarantine",
    "matches",
    _fields(
        (1, "doc_id", StringType(), True),
        (2, "crawl", StringType(), True),
        (3, "segment", StringType(), True),
        (4, "benchmark", StringType(), True),
        (5, "item_id", StringType(), True),
        (6, "kind", StringType(), True),  # "ngram" (exact 13-gram overlap) | "near" (aligned windows) | "semantic"
        (7, "overlap_fraction", DoubleType(), True),  # n-gram share, similarity (near), margin (semantic)
        (8, "char_start", LongType(), True),  # span in curated.documents.text
        (9, "char_end", LongType(), True),
        (10, "decision", StringType(), True),  # always "eval_contaminated"
        (11, "deletion_key", StringType(), True),
    ),
    partition_by=("benchmark", "crawl", "segment"),
)

# One row per (benchmark, segment) screening: which documents were checked against which eval items (their
# snapshots), when, with what result. Run views read coverage from here, as data: snapshot history is not
# kept forever (erasure expires it).
QUARANTINE_SCREENINGS = TableDef(
    "quarantine",
    "screenings",
    _fields(
        (1, "benchmark", StringType(), True),
        (2, "crawl", StringType(), True),
        (3, "segment", StringType(), True),
        (4, "documents_checked", LongType(), True),
        (5, "contaminated_documents", LongType(), True),
        (6, "matches", LongType(), True),
        (7, "eval_items_snapshot_id", LongType(), False),
        (8, "curated_snapshot_id", LongType(), False),
        (9, "screened_at", TimestamptzType(), True),
        (10, "dagster_run_id", StringType(), True),
    ),
    partition_by=("benchmark", "crawl", "segment"),
)

# One row per run view. The frozen part (everything hashed into manifest_sha256, kept in manifest_json) never
# changes; status moves candidate -> published | rejected, published -> superseded, each move one commit
# that rewrites only this view's partition, so the table's snapshot history is the audit log.
RUN_VIEW_MANIFESTS = TableDef(
    *contract.MANIFESTS_TABLE.split("."),
    _fields(
        (1, "run_view_id", StringType(), True),  # <name>-<manifest_sha256[:12]>
        (2, "name", StringType(), True),
        (3, "status", StringType(), True),  # candidate | published | rejected | superseded
        (4, "manifest_sha256", StringType(), True),
        (5, "manifest_json", StringType(), True),  # canonical JSON (sorted keys), the bytes hashed
        (6, "tokenizer_id", StringType(), True),
        (7, "seed", LongType(), True),
        (8, "n_samples", LongType(), True),
        (9, "n_tokens", LongType(), True),
        (10, "created_at", TimestamptzType(), True),
        (11, "created_by_run_id", StringType(), True),
        (12, "reviewer", StringType(), False),
        (13, "decided_at", TimestamptzType(), False),
        (14, "decision_comment", StringType(), False),
        (15, "decided_by_run_id", StringType(), False),
        (16, "superseded_by_request", StringType(), False),  # governance.deletion_requests.request_id
        (17, "supersedes", StringType(), False),  # the run view this candidate replaces (deletion rebuilds)
    ),
    partition_by=("run_view_id",),
)

# The selected documents of a run view in its canonical order (sample_index 0..n-1): a document appears once
# per repetition. Tokens are not copied: the loader reads them from tokenized.documents at the pinned snapshot.
RUN_VIEW_SAMPLES = TableDef(
    *contract.SAMPLES_TABLE.split("."),
    _fields(
        (1, "run_view_id", StringType(), True),
        (2, "sample_index", LongType(), True),
        (3, "doc_id", StringType(), True),
        (4, "record_id", StringType(), True),
        (5, "deletion_key", StringType(), True),
        (6, "tokenizer_id", StringType(), True),
        (7, "crawl", StringType(), True),
        (8, "segment", StringType(), True),
        (9, "component", StringType(), True),
        (10, "repetition", IntegerType(), True),
        (11, "n_tokens", IntegerType(), True),
        (12, "tokens_sha256", StringType(), True),
    ),
    partition_by=("run_view_id",),
)

# Deletion requests (takedown, opt-out, licence withdrawal): one row per request; status pending ->
# completed as propagation finishes, with the deletion report (per table: rows deleted, snapshots expired,
# files removed, matching rows left in every retained snapshot) as JSON.
GOVERNANCE_DELETION_REQUESTS = TableDef(
    "governance",
    "deletion_requests",
    _fields(
        (1, "request_id", StringType(), True),
        (2, "key_type", StringType(), True),  # url | domain | deletion_key | record_id | doc_id
        (3, "value", StringType(), True),
        (4, "reason", StringType(), True),
        (5, "requested_by", StringType(), True),
        (6, "requested_at", TimestamptzType(), True),
        (7, "status", StringType(), True),  # pending | completed
        (8, "completed_at", TimestamptzType(), False),
        (9, "propagated_by_run_id", StringType(), False),
        (10, "report_json", StringType(), False),
    ),
    partition_by=("request_id",),
)

# Versioned policies (curation thresholds, run-view mixture, deletion policy): one row per version, the kind's
# partition rewritten on each change, so the table's snapshot history is the audit log. Exactly one version per
# kind is `active`; version 0 is the code's defaults (written when the first proposal of the kind is applied).
GOVERNANCE_POLICIES = TableDef(
    "governance",
    "policies",
    _fields(
        (1, "kind", StringType(), True),  # thresholds | mixture | deletion
        (2, "version", LongType(), True),
        (3, "policy_json", StringType(), True),  # canonical JSON (sorted keys), the bytes hashed
        (4, "policy_sha256", StringType(), True),
        (5, "parent_version", LongType(), False),
        (6, "status", StringType(), True),  # active | retired | rolled_back
        (7, "created_by", StringType(), True),  # the proposer (a person or agent:<name>)
        (8, "approved_by", StringType(), False),
        (9, "proposal_id", StringType(), False),
        (10, "created_at", TimestamptzType(), True),
        (11, "activated_at", TimestamptzType(), False),
    ),
    partition_by=("kind",),
)

# Policy change proposals: the frozen part (everything hashed into proposal_sha256) never changes; status moves
# proposed -> approved | rejected, approved -> applied, applied -> rolled_back, each move one commit rewriting
# only this proposal's partition. The dry-run report names documents by doc_id only (no text, no URL).
GOVERNANCE_PROPOSALS = TableDef(
    "governance",
    "proposals",
    _fields(
        (1, "proposal_id", StringType(), True),  # prop-<16 hex>
        (2, "kind", StringType(), True),  # the policy kind it changes, or `report` (never applied)
        (3, "base_version", LongType(), True),  # the active version the proposal was made against
        (4, "old_json", StringType(), True),  # canonical JSON of the base version
        (5, "new_json", StringType(), True),  # canonical JSON of the proposed policy
        (6, "diff_json", StringType(), True),  # [{path, old, new}]
        (7, "proposal_sha256", StringType(), True),  # sha256 of the canonical frozen part
        (8, "proposed_by", StringType(), True),  # a person, or agent:<name>
        (9, "proposer_input", StringType(), False),  # verbatim
        (10, "tool_outputs", StringType(), False),  # verbatim
        (11, "reason", StringType(), False),
        (12, "dry_run_json", StringType(), True),
        (13, "status", StringType(), True),  # proposed | approved | rejected | applied | rolled_back
        (14, "reviewer", StringType(), False),
        (15, "decision_comment", StringType(), False),
        (16, "rollback_of", StringType(), False),  # the applied proposal this one undoes
        (17, "rolled_back_by", StringType(), False),
        (18, "new_version", LongType(), False),  # the policy version applying it made active
        (19, "applied_json", StringType(), False),  # what applying changed: partitions, actual flips vs dry-run
        (20, "created_at", TimestamptzType(), True),
        (21, "decided_at", TimestamptzType(), False),
        (22, "applied_at", TimestamptzType(), False),
        (23, "decided_by_run_id", StringType(), False),
        (24, "applied_by_run_id", StringType(), False),
    ),
    partition_by=("proposal_id",),
)

TABLES: dict[str, TableDef] = {
    t.identifier: t
    for t in (
        RAW_WARC_RECORDS,
        RAW_REJECTED_RECORDS,
        CURATED_DOCUMENTS,
        CURATED_EXACT_DUPLICATES,
        CURATED_LANGID_VALIDATION,
        DEDUP_MINHASH_BANDS,
        DEDUP_MINHASH_SIGNATURES,
        DEDUP_NEAR_DUPLICATES,
        DEDUP_EMBEDDINGS,
        DEDUP_SEMANTIC_CENTROIDS,
        DEDUP_SEMANTIC_LINKS,
        DEDUP_SPLIT_ASSIGNMENTS,
        TOKENIZED_TOKENIZERS,
        TOKENIZED_DOCUMENTS,
        QUARANTINE_EVAL_ITEMS,
        QUARANTINE_BENCHMARK_SOURCES,
        QUARANTINE_MATCHES,
        QUARANTINE_SCREENINGS,
        RUN_VIEW_MANIFESTS,
        RUN_VIEW_SAMPLES,
        GOVERNANCE_DELETION_REQUESTS,
        GOVERNANCE_POLICIES,
        GOVERNANCE_PROPOSALS,
    )
}
