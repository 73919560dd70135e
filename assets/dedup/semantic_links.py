"""Semantic links as data, found in sub-quadratic time (SemDeDup's design): k-means centroids fitted once on a
seeded sample of `dedup.embeddings` and stored by version (`dedup.semantic_centroids`); each document is put in
the buckets of its `probes` nearest centroids, and exact cosines are computed only within a bucket. No Dagster.

Links are found crawl by crawl: the links of crawl k are the pairs whose later document (canonical (crawl,
doc_id) order) is in crawl k, the other in crawl k or before, with cosine >= `threshold`, written to crawl k's
partition of `dedup.semantic_links` with the threshold, the model's sha256 and the centroid version. One task per
range of centroids streams the embeddings of crawls <= k and keeps the documents whose buckets it owns; a pair
that shares several buckets is emitted by the smallest one only, so the rows depend on neither the task count nor
the order tasks finish in. Whether a pair is found depends only on its two vectors (their nearest centroids,
recomputed exactly per row) and the centroids; its cosine is recomputed from the two stored vectors alone
(float64, a fixed summation order), so no other document changes a pair's decision.

Cost per crawl: the bucket assignment is linear in the documents of crawls <= k (every task reads them); the
comparisons are (documents of crawl k) x (bucket size) per probe. With fixed centroids a bucket grows with the
corpus, so the comparisons per new document grow linearly with it (bench/splits_scale.py measures both).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, EqualTo, LessThanOrEqual

from assets.dedup.embeddings_table import vectors_from_binary
from assets.dedup.splits import SEMANTIC_THRESHOLD
from assets.knobs import knob
from iceberg_catalog import CommitResult, FileWriter, Lakehouse, Provenance, TaskOutput, TaskResult
from iceberg_catalog.schemas import DEDUP_EMBEDDINGS, DEDUP_SEMANTIC_CENTROIDS, DEDUP_SEMANTIC_LINKS

_MARGIN = 1e-3  # candidates from float32 products: far wider than their rounding error
_CHUNK = 4096  # rows put in buckets at a time
# rows of a bucket's similarity matrix computed at a time: memory _BLOCK x bucket floats, and up to as many
# candidate pairs (a bucket of near-identical documents makes nearly every pair a candidate)
_BLOCK = 512
_PAIRS = 16_384  # pairs whose cosines are computed at a time (2 x 16,384 x dim float64: 64 MiB at dim 256)


@dataclass(frozen=True)
class LinkParams:
    """Which pairs are links (`threshold`) and how they are found (centroids fitted once, then buckets)."""

    threshold: float = knob(SEMANTIC_THRESHOLD, "cosine from which two documents are semantic neighbours")
    centroids: int = knob(1024, "k-means centroids (buckets); mean bucket = probes x documents / centroids")
    probes: int = knob(2, "nearest centroids each document is put in: 2 finds links that straddle a border")
    sample_docs: int = knob(50_000, "documents the centroids are fitted on (a seeded sample, chosen by doc_id)")
    iterations: int = knob(10, "k-means iterations of the one fit")
    seed: int = knob(0, "seed of the sample and of the initial centroids")
    tasks: int = knob(2, "link tasks per crawl, each owning a range of centroids (the rows do not depend on it)")

    def __post_init__(self) -> None:
        if not -1 <= self.threshold <= 1:
            raise ValueError(f"semantic threshold is a cosine in [-1, 1], got {self.threshold}")
        for name in ("centroids", "probes", "sample_docs", "iterations", "tasks"):
            if getattr(self, name) < 1:
                raise ValueError(f"LinkParams.{name} must be >= 1, got {getattr(self, name)}")
        if self.probes > self.centroids:
            raise ValueError(f"LinkParams.probes ({self.probes}) cannot exceed centroids ({self.centroids})")


# --- centroids, fitted once -----------------------------------------------------------------------------------


def sample_rank(doc_ids: Sequence[str], seed: int) -> np.ndarray:
    """Each document's seeded rank for the fit sample (a function of its doc_id alone)."""
    ranks = [hashlib.sha256(f"tokenlake-centroids\0{seed}\0{d}".encode()).digest()[:8] for d in doc_ids]
    return np.frombuffer(b"".join(ranks), ">u8").astype(np.uint64) if ranks else np.zeros(0, np.uint64)


def fit_centroids(vectors: np.ndarray, k: int, iterations: int, seed: int) -> np.ndarray:
    """Spherical k-means (unit centroids, cosine assignment) of `vectors` in the given order: seeded initial rows,
    then `iterations` rounds; a centroid that loses every member keeps its place. (min(k, n), dim) float32."""
    x = np.nan_to_num(np.asarray(vectors, np.float32))
    k = min(k, len(x))
    c = x[np.sort(np.random.default_rng(seed).choice(len(x), size=k, replace=False))].copy()
    for _ in range(iterations):
        nearest = np.argmax(x @ c.T, axis=1)
        sums = np.zeros_like(c)
        np.add.at(sums, nearest, x)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        c = np.where(norms > 0, sums / np.maximum(norms, 1e-12), c).astype(np.float32)
    return c


def centroid_version(model_sha256: str, centroids: np.ndarray, params: LinkParams) -> str:
    """The version of a fit: the model, the fit's settings and the centroids' bytes."""
    digest = hashlib.sha256(f"{model_sha256}\0{params.centroids}\0{params.seed}\0".encode())
    digest.update(np.ascontiguousarray(centroids, "<f4").tobytes())
    return digest.hexdigest()[:32]


def read_centroids(lakehouse: Lakehouse, model_sha256: str, params: LinkParams) -> tuple[str, np.ndarray] | None:
    """The stored fit for this model, centroid count and seed (the smallest version id, if several), or None. A
    stored fit is reused whatever `sample_docs` and `iterations` say now: they shape only the first fit."""
    where = And(EqualTo("model_sha256", model_sha256), EqualTo("seed", params.seed))
    rows = lakehouse.scan(DEDUP_SEMANTIC_CENTROIDS, ("centroid_version", "centroid", "vector"), where)
    rows = rows.sort_by([("centroid_version", "ascending"), ("centroid", "ascending")])
    versions = rows.column("centroid_version").to_pylist()
    for v in dict.fromkeys(versions):
        mine = rows.filter(pc.equal(rows.column("centroid_version"), v))
        if mine.num_rows == params.centroids:
            return v, vectors_from_binary(mine.column("vector"), np.dtype("<f4"))
    return None


def fit_sample(lakehouse: Lakehouse, embeddings_snapshot: int | None, model_sha256: str, params: LinkParams):
    """The `sample_docs` documents with the smallest seeded rank among the stored embeddings of this model, in
    rank order: (vectors, documents sampled). Streamed: at most 2 x sample_docs vectors held."""
    keep_v, keep_r = np.zeros((0, 0), np.float32), np.zeros(0, np.uint64)
    where = EqualTo("model_sha256", model_sha256)
    for batch in lakehouse.batches_at(DEDUP_EMBEDDINGS, embeddings_snapshot, ("doc_id", "vector"), where):
        v, r = vectors_from_binary(batch.column("vector")), sample_rank(batch.column("doc_id").to_pylist(), params.seed)
        keep_v = np.concatenate([keep_v, v]) if len(keep_v) else v
        keep_r = np.concatenate([keep_r, r])
        if len(keep_r) > params.sample_docs:
            best = np.argpartition(keep_r, params.sample_docs - 1)[: params.sample_docs]
            keep_v, keep_r = keep_v[best], keep_r[best]
    order = np.argsort(keep_r, kind="stable")
    return keep_v[order], len(order)


def ensure_centroids(
    lakehouse: Lakehouse, embeddings_snapshot: int | None, model_sha256: str, params: LinkParams, prov: Provenance
) -> tuple[str, np.ndarray, CommitResult | None]:
    """The stored centroids, or a fit on a seeded sample written as a new version: (version, centroids, commit)."""
    stored = read_centroids(lakehouse, model_sha256, params)
    if stored is not None:
        return (*stored, None)
    sample, n = fit_sample(lakehouse, embeddings_snapshot, model_sha256, params)
    if n < params.centroids:
        raise ValueError(
            f"{n} embedded documents cannot seed {params.centroids} centroids: embed more segments first "
            "(job embed) or lower LinkParams.centroids"
        )
    centroids = fit_centroids(sample, params.centroids, params.iterations, params.seed)
    version = centroid_version(model_sha256, centroids, params)
    writer = lakehouse.writer(DEDUP_SEMANTIC_CENTROIDS, {"centroid_version": version})
    rows = {
        "centroid_version": [version] * len(centroids),
        "model_sha256": [model_sha256] * len(centroids),
        "centroid": pa.array(np.arange(len(centroids), dtype=np.int32)),
        "vector": [row.astype("<f4").tobytes() for row in centroids],
        "sample_docs": pa.array(np.full(len(centroids), n, np.int64)),
        "seed": pa.array(np.full(len(centroids), params.seed, np.int64)),
    }
    writer.write(pa.table(rows, schema=DEDUP_SEMANTIC_CENTROIDS.arrow_schema))
    return version, centroids, writer.commit(prov)


def nearest_centroids(vectors: np.ndarray, centroids: np.ndarray, probes: int) -> np.ndarray:
    """Each row's `probes` nearest centroids (largest cosine first, ties to the smaller index), (n, probes).
    A float32 product shortlists probes + 2 candidates; their cosines are then recomputed per row in float64
    (elementwise, a fixed order), so a row's buckets do not depend on the rows batched with it."""
    x = np.nan_to_num(np.asarray(vectors, np.float32))
    short = min(probes + 2, len(centroids))
    out = np.empty((len(x), probes), np.int32)
    for lo in range(0, len(x), _CHUNK):  # bounds the (rows x centroids) and (rows x short x dim) temporaries
        part = x[lo : lo + _CHUNK]
        cand = np.argpartition(-(part @ centroids.T), short - 1, axis=1)[:, :short]
        exact = (part[:, None, :].astype(np.float64) * centroids[cand].astype(np.float64)).sum(axis=2)
        order = np.lexsort((cand, -exact), axis=1)[:, :probes]
        out[lo : lo + _CHUNK] = np.take_along_axis(cand, order, axis=1)
    return out


# --- the links of one crawl -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkTask:
    """Find the links of `crawl` within the buckets [lo, hi)."""

    index: int
    lakehouse: Lakehouse
    crawl: str
    embeddings_snapshot: int | None
    model_sha256: str
    centroid_version: str
    centroids: np.ndarray
    lo: int
    hi: int
    params: LinkParams
    out: TaskOutput


def plan(
    lakehouse: Lakehouse,
    crawl: str,
    embeddings_snapshot: int | None,
    model_sha256: str,
    centroids: tuple[str, np.ndarray],
    params: LinkParams,
    run: str,
) -> list[LinkTask]:
    """One task per contiguous range of centroids (`params.tasks` ranges)."""
    version, c = centroids
    bounds = np.linspace(0, len(c), min(params.tasks, len(c)) + 1).astype(int)
    ranges = enumerate(zip(bounds[:-1], bounds[1:]))
    return [
        LinkTask(i, lakehouse, crawl, embeddings_snapshot, model_sha256, version, c, lo, hi, params, out)
        for i, (lo, hi) in ranges
        for out in (lakehouse.output(DEDUP_SEMANTIC_LINKS, {"crawl": crawl}, run, i),)
    ]


@dataclass(frozen=True)
class Bucketed:
    """The documents of crawls <= k in a task's buckets: canonical keys, crawl-k flags, vectors, probes."""

    keys: np.ndarray  # "crawl NUL doc_id", object array
    new: np.ndarray
    vectors: np.ndarray  # float16: half the memory; compared in float32
    probes: np.ndarray


def bucketed(task: LinkTask) -> Bucketed:
    """Stream the embeddings of crawls <= the task's crawl; keep the rows with a probe in [lo, hi)."""
    where = And(EqualTo("model_sha256", task.model_sha256), LessThanOrEqual("crawl", task.crawl))
    parts: list[tuple] = []
    columns = ("doc_id", "crawl", "vector")
    for batch in task.lakehouse.batches_at(DEDUP_EMBEDDINGS, task.embeddings_snapshot, columns, where):
        v = vectors_from_binary(batch.column("vector"))
        p = nearest_centroids(v, task.centroids, task.params.probes)
        mine = np.flatnonzero(((p >= task.lo) & (p < task.hi)).any(axis=1))
        if not len(mine):
            continue
        crawls, ids = batch.column("crawl").to_pylist(), batch.column("doc_id").to_pylist()
        keys = np.array([f"{crawls[i]}\0{ids[i]}" for i in mine], object)  # (numpy's str + would drop a NUL)
        new = np.array([crawls[i] == task.crawl for i in mine], bool)
        parts.append((keys, new, v[mine].astype(np.float16), p[mine]))
    if not parts:
        return Bucketed(np.zeros(0, object), np.zeros(0, bool), np.zeros((0, 1), np.float16), np.zeros((0, 1)))
    return Bucketed(*(np.concatenate(a) for a in zip(*parts)))


def bucket_members(b: Bucketed, lo: int, hi: int) -> Iterator[tuple[int, np.ndarray]]:
    """(bucket, its rows ascending) for the buckets [lo, hi), from one sort of the rows' probes."""
    flat = b.probes.ravel()
    order = np.argsort(flat, kind="stable")
    rows, sorted_buckets = order // b.probes.shape[1], flat[order]
    for bucket in range(lo, hi):
        s, e = np.searchsorted(sorted_buckets, [bucket, bucket + 1])
        yield bucket, np.sort(rows[s:e])


def bucket_pairs(
    b: Bucketed, bucket: int, members: np.ndarray, threshold: float
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(later, earlier) row pairs of one bucket (`members`: its rows) whose float32 cosine is near `threshold` or
    above: the later row in crawl k, each pair once, and only in the smallest bucket the two rows share."""
    later = members[b.new[members]]
    v = b.vectors[members].astype(np.float32)
    for lo in range(0, len(later), _BLOCK):
        rows = later[lo : lo + _BLOCK]
        i, j = np.nonzero(b.vectors[rows].astype(np.float32) @ v.T >= threshold - _MARGIN)
        a, e = rows[i], members[j]
        # both in crawl k: keep the pair once, with the later key as `a`
        keep = (a != e) & (~b.new[e] | (b.keys[e] < b.keys[a]))
        a, e = a[keep], e[keep]
        shared = np.where(b.probes[a][:, :, None] == b.probes[e][:, None, :], b.probes[a][:, :, None], 1 << 30)
        own = shared.min(axis=(1, 2)) == bucket
        yield a[own], e[own]


def pair_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosines of two (n, dim) arrays of unit vectors, from each pair's two rows alone (float64, a fixed
    summation order)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64)).sum(axis=1)


def run_task(task: LinkTask) -> TaskResult:
    """The links of the task's buckets, written as data files; never commits. Stats: documents bucketed,
    comparisons (cosines computed), links, largest bucket."""
    b = bucketed(task)
    writer, stats = FileWriter(task.out), bucket_stats(b, task.lo, task.hi)
    links = 0
    for later, earlier, cos in links_in_buckets(b, task.lo, task.hi, task.params.threshold):
        writer.write(link_table(b.keys[later], b.keys[earlier], cos, task))
        links += len(later)
    return TaskResult(task.index, (writer.close(),), {**stats, "links": links})


def links_in_buckets(b: Bucketed, lo: int, hi: int, threshold: float) -> Iterator[tuple[np.ndarray, ...]]:
    """(later rows, earlier rows, cosines) of the links found in buckets [lo, hi), each link once."""
    for bucket, members in bucket_members(b, lo, hi):
        for later, earlier in bucket_pairs(b, bucket, members, threshold):
            for k in range(0, len(later), _PAIRS):  # the float64 rows of at most _PAIRS pairs at a time
                a, e = later[k : k + _PAIRS], earlier[k : k + _PAIRS]
                cos = pair_cosines(b.vectors[a], b.vectors[e])
                hit = cos >= threshold
                if hit.any():
                    yield a[hit], e[hit], cos[hit]


def bucket_stats(b: Bucketed, lo: int, hi: int) -> dict[str, int]:
    """Documents held, cosines the buckets [lo, hi) cost (crawl-k members x members), their largest size."""
    members = [m for _, m in bucket_members(b, lo, hi)]
    sizes = np.array([len(m) for m in members], np.int64)
    new = np.array([b.new[m].sum() for m in members], np.int64)
    return {
        "documents": len(b.keys),
        "comparisons": int((sizes * new).sum()),
        "largest_bucket": int(sizes.max(initial=0)),
    }


def link_table(later: np.ndarray, earlier: np.ndarray, cosine: np.ndarray, task: LinkTask) -> pa.Table:
    """Rows of dedup.semantic_links, sorted by (doc_id, linked crawl, linked doc_id)."""
    n = len(later)
    (lc, ld), (ec, ed) = (zip(*(k.split("\0", 1) for k in keys)) for keys in (later, earlier))
    return pa.table(
        {
            "doc_id": list(ld),
            "crawl": list(lc),
            "linked_doc_id": list(ed),
            "linked_crawl": list(ec),
            "cosine": cosine,
            "threshold": np.full(n, task.params.threshold),
            "model_sha256": [task.model_sha256] * n,
            "centroid_version": [task.centroid_version] * n,
        },
        schema=DEDUP_SEMANTIC_LINKS.arrow_schema,
    ).sort_by([("doc_id", "ascending"), ("linked_crawl", "ascending"), ("linked_doc_id", "ascending")])


def commit(
    lakehouse: Lakehouse, crawl: str, results: Sequence[TaskResult], provenance: Provenance
) -> Mapping[object, CommitResult]:
    """Replace the crawl's partition of dedup.semantic_links with the tasks' files (one transaction)."""
    return lakehouse.commit(results, {DEDUP_SEMANTIC_LINKS: {"crawl": crawl}}, {DEDUP_SEMANTIC_LINKS: provenance})


def totals(results: Sequence[TaskResult]) -> dict[str, int]:
    """The tasks' stats: sums, and the largest bucket (a bucket belongs to one task)."""
    out = {k: sum(int(r.stats[k]) for r in results) for k in ("documents", "comparisons", "links")}
    return {**out, "largest_bucket": max((int(r.stats["largest_bucket"]) for r in results), default=0)}
