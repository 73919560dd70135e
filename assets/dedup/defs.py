"""Near duplicates: MinHash LSH bands per segment -> dedup.minhash_bands + dedup.minhash_signatures; clusters
across every segment -> dedup.near_duplicates. Split clusters: embeddings per segment -> dedup.embeddings; links
and split assignments crawl by crawl -> dedup.semantic_links (+ dedup.semantic_centroids), dedup.split_assignments.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import time

import dagster as dg

from assets import shell
from assets.dedup import embeddings_table, near, signatures, split_assignments
from assets.dedup.near_plan import NearDuplicateParams
from assets.partitions import crawl_segments
from assets.shell import config_from, md_table, params_from, provenance, run_tasks, table_key
from iceberg_catalog import schemas as T
from resources import IcebergCatalogResource, parse_partition_key
from resources.executor import TaskExecutorResource

MINHASH_BANDS = table_key(T.DEDUP_MINHASH_BANDS)
MINHASH_SIGNATURES = table_key(T.DEDUP_MINHASH_SIGNATURES)
NEAR_DUPLICATES = table_key(T.DEDUP_NEAR_DUPLICATES)
EMBEDDINGS = table_key(T.DEDUP_EMBEDDINGS)
SEMANTIC_LINKS = table_key(T.DEDUP_SEMANTIC_LINKS)
SPLIT_ASSIGNMENTS = table_key(T.DEDUP_SPLIT_ASSIGNMENTS)
SPLIT_VERSION = "split-clusters-1"
MINHASH_VERSION = "minhash-2"
MinHashConfig = config_from(signatures.SignatureParams, "MinHashConfig")
NearDuplicateConfig = config_from(NearDuplicateParams, "NearDuplicateConfig")
EmbeddingConfig = config_from(embeddings_table.EmbeddingParams, "EmbeddingConfig")
SplitClusterConfig = config_from(split_assignments.SplitClusterParams, "SplitClusterConfig")


@dg.multi_asset(
    name="dedup_minhash",
    specs=[
        shell.table_spec(
            T.DEDUP_MINHASH_BANDS,
            ["doc_id"],
            deps=[table_key(T.CURATED_DOCUMENTS)],
            code_version=MINHASH_VERSION,
            description="LSH band hashes of every kept document (dedup.minhash_bands): one row per "
            "(document, band), one row group per band per batch.",
        ),
        shell.table_spec(
            T.DEDUP_MINHASH_SIGNATURES,
            ["doc_id"],
            deps=[table_key(T.CURATED_DOCUMENTS)],
            code_version=MINHASH_VERSION,
            description="MinHash signatures, read to verify candidate pairs (dedup.minhash_signatures).",
        ),
    ],
    partitions_def=crawl_segments,
    pool="iceberg_dedup",
    can_subset=False,
)
def dedup_minhash(
    context: dg.AssetExecutionContext,
    config: MinHashConfig,
    catalog: IcebergCatalogResource,
    executor: TaskExecutorResource,
):
    """Plan one task per slice of the segment's kept documents (curated.documents pinned at its current
    snapshot), hash them on the executor, commit both tables."""
    ref, params = parse_partition_key(context.partition_key), params_from(signatures.SignatureParams, config)
    lakehouse = catalog.lakehouse()
    upstream = lakehouse.snapshot_ids([T.CURATED_DOCUMENTS])
    tasks = signatures.plan(
        lakehouse, ref.crawl, ref.segment, upstream[T.CURATED_DOCUMENTS.identifier], params, context.run.run_id
    )
    t0 = time.perf_counter()
    results = run_tasks(context, executor.executor(), signatures.run_task, tasks)
    seconds = time.perf_counter() - t0  # hashing and writing; the commit is not included
    keys = ((T.DEDUP_MINHASH_BANDS, MINHASH_BANDS), (T.DEDUP_MINHASH_SIGNATURES, MINHASH_SIGNATURES))
    prov = {t: provenance(context, key, params.hashed(), upstream) for t, key in keys}
    commits = signatures.commit(lakehouse, ref.crawl, ref.segment, results, prov)
    bands = minhash_metadata(signatures.totals(results), commits[T.DEDUP_MINHASH_BANDS], len(tasks), seconds)
    yield dg.MaterializeResult(asset_key=MINHASH_BANDS, metadata=bands)
    sigs = commits[T.DEDUP_MINHASH_SIGNATURES]
    sig_meta = {"dagster/row_count": sigs.rows, **shell.commit_metadata(sigs)}
    yield dg.MaterializeResult(asset_key=MINHASH_SIGNATURES, metadata=sig_meta)


def minhash_metadata(totals: dict, commit, tasks: int, seconds: float) -> dict:
    """Counts and rate of one segment's hashing."""
    return {
        "dagster/row_count": commit.rows,
        "documents": totals["documents"],
        "documents_without_shingles": totals["documents_without_shingles"],
        **shell.commit_metadata(commit),
        "tasks": tasks,
        "signatures_per_second": round(totals["documents"] / max(seconds, 1e-9), 1),
        "seconds": round(seconds, 2),
    }


@dg.asset(
    **shell.table_asset(T.DEDUP_NEAR_DUPLICATES, ["doc_id"]),
    deps=[MINHASH_BANDS, MINHASH_SIGNATURES],
    code_version="near-dedup-2",
    automation_condition=dg.AutomationCondition.eager(),
)
def near_duplicates(
    context: dg.AssetExecutionContext,
    config: NearDuplicateConfig,
    catalog: IcebergCatalogResource,
    executor: TaskExecutorResource,
) -> dg.MaterializeResult:
    """Near-duplicate clusters over ALL materialised segments (dedup.near_duplicates), as stages of tasks on the
    executor, each holding one shard. The earliest crawl, then the smallest doc_id, is a cluster's canonical
    document; crawls are added in order and a run rewrites only the crawls from the first whose inputs changed.
    Candidate pairs are verified by `verify` (exact Jaccard by default)."""
    params, lakehouse = params_from(NearDuplicateParams, config), catalog.lakehouse()
    t0 = time.perf_counter()
    plan = near.plan(lakehouse, params, context.run.run_id)
    context.log.info("recomputing crawls %s (%d partitions)", plan.recomputed(), plan.parts)
    result = near.execute(plan, LoggedExecutor(context, executor.executor()))
    prov = provenance(context, NEAR_DUPLICATES, params.hashed(), plan.snapshot_ids)
    commit = near.commit(lakehouse, plan, result, prov)
    stats = result.stats
    context.log.info(
        "%d documents, %d candidate pairs, %d verified, %d near duplicates",
        stats["documents"],
        stats["candidate_pairs"],
        stats["verified_pairs"],
        stats["near_duplicates"],
    )
    seconds = time.perf_counter() - t0
    return dg.MaterializeResult(metadata=near_metadata(stats, result.stages, commit, plan.snapshot_ids, seconds))


@dg.asset(
    **shell.table_asset(T.DEDUP_EMBEDDINGS, ["doc_id"]),
    deps=[table_key(T.CURATED_DOCUMENTS)],
    partitions_def=crawl_segments,
    code_version=f"embeddings-1-{embeddings_table.EMBEDDING_MODEL}",
    description="Each kept English document's embedding (dedup.embeddings): float16, with the model's id and sha256.",
)
def embeddings(
    context: dg.AssetExecutionContext,
    config: EmbeddingConfig,
    catalog: IcebergCatalogResource,
    executor: TaskExecutorResource,
) -> dg.MaterializeResult:
    """Plan one task per slice of the segment's kept English documents (curated.documents pinned at its current
    snapshot), embed them on the executor, commit the segment's partition."""
    ref, params = parse_partition_key(context.partition_key), params_from(embeddings_table.EmbeddingParams, config)
    lakehouse = catalog.lakehouse()
    upstream = lakehouse.snapshot_ids([T.CURATED_DOCUMENTS])
    run = context.run.run_id
    tasks = embeddings_table.plan(
        lakehouse, ref.crawl, ref.segment, upstream[T.CURATED_DOCUMENTS.identifier], params, run
    )
    t0 = time.perf_counter()
    results = run_tasks(context, executor.executor(), embeddings_table.run_task, tasks)
    seconds = time.perf_counter() - t0  # embedding and writing; the commit is not included
    prov = provenance(context, EMBEDDINGS, params.hashed(), upstream)
    commit = embeddings_table.commit(lakehouse, ref.crawl, ref.segment, results, prov)[T.DEDUP_EMBEDDINGS]
    documents = embeddings_table.totals(results)["documents"]
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": commit.rows,
            **shell.commit_metadata(commit),
            "tasks": len(tasks),
            "model_sha256": params.hashed()["model_sha256"],
            "documents_per_second": round(documents / max(seconds, 1e-9), 1),
            "seconds": round(seconds, 2),
        }
    )


SPLIT_SPECS = [
    shell.table_spec(t, ["doc_id"], deps=deps, code_version=SPLIT_VERSION, skippable=True, description=what)
    for t, deps, what in (
        (
            T.DEDUP_SEMANTIC_LINKS,
            [EMBEDDINGS],
            "Semantic links per crawl, found within k-means buckets (dedup.semantic_links); the centroids, fitted "
            "once on a seeded sample, are kept by version in dedup.semantic_centroids.",
        ),
        (
            T.DEDUP_SPLIT_ASSIGNMENTS,
            [table_key(T.CURATED_DOCUMENTS), table_key(T.CURATED_EXACT_DUPLICATES), NEAR_DUPLICATES],
            "Each kept document's split cluster and split, committed crawl by crawl in crawl order.",
        ),
    )
]


@dg.multi_asset(name="dedup_split_clusters", pool="iceberg_dedup", can_subset=False, specs=SPLIT_SPECS)
def dedup_split_clusters(
    context: dg.AssetExecutionContext,
    config: SplitClusterConfig,
    catalog: IcebergCatalogResource,
    executor: TaskExecutorResource,
):
    """For each crawl without stored split assignments under this rule, in crawl order: its semantic links
    (tasks per range of centroids on the executor), then its split assignments; earlier crawls are only read.
    The centroids are a side table of the links (like quarantine.screenings of the matches): an aggregate with no
    document's row, so nothing for a deletion to reach."""
    params, lakehouse = params_from(split_assignments.SplitClusterParams, config), catalog.lakehouse()
    upstream = lakehouse.snapshot_ids(split_assignments.INPUTS)
    keys = {
        T.DEDUP_SEMANTIC_CENTROIDS: SEMANTIC_LINKS,
        T.DEDUP_SEMANTIC_LINKS: SEMANTIC_LINKS,
        T.DEDUP_SPLIT_ASSIGNMENTS: SPLIT_ASSIGNMENTS,
    }
    prov = {t: provenance(context, key, params.hashed(), upstream) for t, key in keys.items()}
    t0 = time.perf_counter()
    built = split_assignments.build(lakehouse, params, executor.executor(), context.run.run_id, prov)
    stats, seconds = built["stats"], round(time.perf_counter() - t0, 2)
    context.log.info("split clusters: crawls %s, centroids %s", sorted(stats["crawls"]), stats["centroid_version"])
    for t in (T.DEDUP_SEMANTIC_LINKS, T.DEDUP_SPLIT_ASSIGNMENTS):
        commit = built["commits"].get(t)
        if commit is not None:
            meta = {"dagster/row_count": commit.rows, **shell.commit_metadata(commit, built["pinned"])}
            yield dg.MaterializeResult(asset_key=keys[t], metadata={**meta, **split_metadata(stats, seconds)})


def split_metadata(stats: dict, seconds: float) -> dict:
    """The centroid version and, per recomputed crawl, its link search and assignment counts."""
    header = ["crawl", "documents bucketed", "comparisons", "links", "largest bucket", "assigned"]
    cols = ("documents", "comparisons", "links", "largest_bucket", "assigned")
    rows = [(c, *(s[k] for k in cols)) for c, s in sorted(stats["crawls"].items())]
    return {
        "centroid_version": stats["centroid_version"],
        "centroids_fitted": stats["centroids_fitted"],
        "seconds": seconds,
        "crawls": md_table(header, rows),
    }


class LoggedExecutor:
    """The executor, each stage's progress logged to the run (`shell.run_tasks`)."""

    def __init__(self, context: dg.AssetExecutionContext, executor) -> None:
        self.context, self.executor = context, executor

    def map(self, fn, tasks, progress=None):
        return run_tasks(self.context, self.executor, fn, tasks)


def near_metadata(stats: dict, stages, commit, upstream: dict, seconds: float) -> dict:
    """Counts of the clustering (with the band rows read, and of the earlier crawls' how many the added crawls'
    filter sent on), near duplicates per crawl, and what each stage cost."""
    counts = (
        "documents",
        "bands",
        "band_ranges",
        "partitions",
        "band_rows_read",
        "earlier_band_rows_read",
        "earlier_band_rows_sent",
        "candidate_pairs",
        "verified_pairs",
        "clusters",
        "near_duplicates",
        "rounds",
    )
    return {
        "dagster/row_count": commit.rows,
        **{k: stats[k] for k in counts},
        "recomputed_crawls": ", ".join(stats["recomputed_crawls"]) or "none",
        "seconds": round(seconds, 2),
        **shell.commit_metadata(commit, upstream),
        "near_duplicates_by_crawl": md_table(
            ["crawl", "near duplicates"], sorted(stats["near_duplicates_by_crawl"].items())
        ),
        "stages": md_table(
            ["stage", "tasks", "wall s", "CPU s", "largest task peak RSS MiB", "MiB read"],
            [
                (s.name, s.tasks, s.wall_s, s.cpu_s, round(s.peak_rss_bytes / 2**20, 1), round(s.bytes_read / 2**20, 1))
                for s in stages
            ],
        ),
    }


minhash_job = shell.asset_job(
    "minhash",
    MINHASH_BANDS,
    MINHASH_SIGNATURES,
    description="MinHash signatures and LSH bands of one crawl segment's kept documents.",
)

near_dedup_job = shell.asset_job(
    "near_dedup",
    NEAR_DUPLICATES,
    description="Near-duplicate clusters across every materialised partition (band by band from Iceberg).",
)

embed_job = shell.asset_job(
    "embed", EMBEDDINGS, description="Embeddings of one crawl segment's kept English documents (dedup.embeddings)."
)

split_clusters_job = shell.asset_job(
    "split_clusters",
    SEMANTIC_LINKS,
    SPLIT_ASSIGNMENTS,
    description="Semantic links and split assignments of every crawl not yet assigned, in crawl order.",
)


defs = dg.Definitions(
    assets=[dedup_minhash, near_duplicates, embeddings, dedup_split_clusters],
    jobs=[minhash_job, near_dedup_job, embed_job, split_clusters_job],
)
