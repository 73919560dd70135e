"""Semantic links as data, found in sub-quadratic time (SemDeDup's design): k-means centroids fitted once on a
seeded sample of `dedup.embeddings` and stored by version (`dedup.semantic_centroids`); each document is put in
the buckets of its `probes` nearest centroids, and exact cosines are computed only within a bucket. A bucket
that holds more than `max_bucket` documents is cut by a seeded sub-k-means fitted on its own members (and so on,
`MAX_DEPTH` levels at most): cosines are computed only within a leaf. No Dagster.

Links are found crawl by crawl: the links of crawl k are the pairs whose later document (canonical (crawl,
doc_id) order) is in crawl k, the other in crawl k or before, with cosine >= `threshold`, written to crawl k's
partition of `dedup.semantic_links` with the threshold, the model's sha256 and the centroid version. Two stages
on the executor (`link_crawl`), handing rows on through scratch files (`assets.dedup.shuffle`):
1. route, one task per data file of the embeddings of crawls <= k: each row's `probes` nearest centroids; the
   row goes to the partition of each (a partition is a contiguous range of centroids);
2. link, one task per partition: its buckets one by one, each cut into leaves when it is too large, and the
   pairs of each leaf. The partition count grows with the documents (`task_vectors` rows per task, at least
   `tasks` tasks), so a link task holds about `task_vectors` rows whatever the corpus size (a single bucket
   larger than that is held whole: ~corpus x probes / centroids rows, 16k at 8M documents).
A pair is emitted once: by the smallest top-level bucket the two rows share, and within it by the smallest
leaf they share (a leaf's members and every member's leaves are a function of the bucket's members), so the
rows depend on neither the task count nor the order tasks finish in. A pair whose smallest shared bucket puts
them in different leaves is not found (the recall cost of the cut; `probes` children per level soften it).
Whether a pair is a link depends only on its two vectors: its cosine is recomputed from the two stored vectors
alone (float64, a fixed summation order); whether it is found depends on the centroids and, for a cut bucket,
on that bucket's members when the crawl was added (earlier crawls' stored links never change).

Why cutting buckets and not blocks: with the centroids fixed after the fit a bucket grows with the corpus, so
comparing a new document with all of its bucket (in blocks or not) costs ~probes x corpus / centroids cosines:
adding a crawl to 4N documents costs ~2.5x adding it to N. A cut bucket's leaves hold about `max_bucket` / 2
rows, a new document is in at most probes^(depth + 1) leaves, so its cosines are bounded by a constant and the
comparisons of a crawl grow with the crawl alone (measured: 1.16x cosines for a crawl added to 4x the corpus,
where whole buckets cost 2.5x). What still grows with the corpus, linearly: reading and routing every earlier
row again per crawl (~14 us a row at 1,024 centroids), re-fitting and sub-routing the cut buckets, and the
links themselves where the corpus has more neighbours above the threshold; on a scale model these made the CPU
of an added crawl 1.98x, not <= 1.5x (bench/README.md). Storing each row's routing once would remove the first
(it needs a per-document table). A cut pays only when a bucket is several times `max_bucket`: just above it,
2 children per row and unbalanced children cost more cosines than the whole bucket (measured at 1M), so a cut
is kept only when its children's sizes promise fewer (`bucket_leaves`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, EqualTo, LessThanOrEqual

from assets.dedup import shuffle
from assets.dedup.embeddings_table import vectors_from_binary
from assets.dedup.splits import SEMANTIC_THRESHOLD
from assets.knobs import knob
from iceberg_catalog import CommitResult, FileWriter, Lakehouse, Provenance, ScanSlice, TaskOutput, TaskResult
from iceberg_catalog.schemas import DEDUP_EMBEDDINGS, DEDUP_SEMANTIC_CENTROIDS, DEDUP_SEMANTIC_LINKS

_MARGIN = 1e-3  # candidates from float32 products: far wider than their rounding error
_CHUNK = 4096  # rows put in buckets at a time
# rows of a bucket's similarity matrix computed at a time: memory _BLOCK x bucket floats, and up to as many
# candidate pairs (a bucket of near-identical documents makes nearly every pair a candidate)
_BLOCK = 512
_PAIRS = 16_384  # pairs whose cosines are computed at a time (2 x 16,384 x dim float64: 64 MiB at dim 256)
MAX_DEPTH = 3  # levels of sub-k-means under a bucket: a leaf of near-identical rows cannot be cut by any
FIT_PER_CHILD = 32  # rows a sub-k-means is fitted on per child (the seeded smallest ranks): bounds the fit


@dataclass(frozen=True)
class LinkParams:
    """Which pairs are links (`threshold`) and how they are found (centroids fitted once, then buckets)."""

    threshold: float = knob(SEMANTIC_THRESHOLD, "cosine from which two documents are semantic neighbours")
    centroids: int = knob(1024, "k-means centroids (buckets); mean bucket = probes x documents / centroids")
    probes: int = knob(2, "nearest centroids each document is put in: 2 finds links that straddle a border")
    sample_docs: int = knob(50_000, "documents the centroids are fitted on (a seeded sample, chosen by doc_id)")
    iterations: int = knob(10, "k-means iterations of the one fit")
    seed: int = knob(0, "seed of the sample and of the initial centroids")
    max_bucket: int = knob(2048, "rows a bucket holds before a seeded sub-k-means cuts it into leaves")
    tasks: int = knob(2, "link tasks per crawl at least, each owning a range of centroids (no row depends on it)")
    task_vectors: int = knob(250_000, "bucket rows per link task (sets the task count; no row depends on it)")

    def __post_init__(self) -> None:
        if not -1 <= self.threshold <= 1:
            raise ValueError(f"semantic threshold is a cosine in [-1, 1], got {self.threshold}")
        for name in ("centroids", "probes", "sample_docs", "iterations", "max_bucket", "tasks", "task_vectors"):
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
    c64, out = centroids.astype(np.float64), np.empty((len(x), probes), np.int32)
    for lo in range(0, len(x), _CHUNK):  # bounds the (rows x centroids) and (rows x short x dim) temporaries
        part = x[lo : lo + _CHUNK]
        cand = largest(part @ centroids.T, short)
        exact = (part[:, None, :].astype(np.float64) * c64[cand]).sum(axis=2)
        order = np.lexsort((cand, -exact), axis=1)[:, :probes]
        out[lo : lo + _CHUNK] = np.take_along_axis(cand, order, axis=1)
    return out


def largest(scores: np.ndarray, k: int) -> np.ndarray:
    """The columns of each row's k largest scores, by k rounds of argmax (`scores` is overwritten): at 1,024
    columns ~1 us a row where argpartition took 12 (routing every earlier row is what grows with the corpus)."""
    rows, out = np.arange(len(scores)), np.empty((len(scores), k), np.int64)
    for j in range(k):
        out[:, j] = scores.argmax(axis=1)
        scores[rows, out[:, j]] = -np.inf
    return out


# --- the links of one crawl: route, then link -----------------------------------------------------------------


def routed_schema(probes: int) -> pa.Schema:
    """A routed row: its key, whether it is in the crawl being linked, its stored vector, its buckets."""
    fields = [("key", pa.string()), ("new", pa.bool_()), ("vector", pa.large_binary())]
    return pa.schema([*fields, ("probes", pa.list_(pa.int32(), probes))])


@dataclass(frozen=True)
class CrawlLinks:
    """What every task of one crawl's links shares: partition p owns the centroids [bounds[p], bounds[p + 1])."""

    lakehouse: Lakehouse
    crawl: str
    model_sha256: str
    centroid_version: str
    centroids: np.ndarray
    params: LinkParams
    bounds: tuple[int, ...]
    scratch: str


@dataclass(frozen=True)
class RouteTask:
    """Route the rows of one data file of the embeddings of crawls <= k to the partitions of their buckets."""

    index: int
    crawl: CrawlLinks
    slice: ScanSlice

    @property
    def path(self) -> str:
        return f"{self.crawl.scratch}/route-{self.index:05d}.parquet"


@dataclass(frozen=True)
class LinkTask:
    """Find the links of the crawl within the buckets of partition `index` (every route file's rows of it)."""

    index: int
    crawl: CrawlLinks
    routed: tuple[str, ...]
    out: TaskOutput

    @property
    def lo(self) -> int:
        return self.crawl.bounds[self.index]

    @property
    def hi(self) -> int:
        return self.crawl.bounds[self.index + 1]


def plan(
    lakehouse: Lakehouse,
    crawl: str,
    embeddings_snapshot: int | None,
    model_sha256: str,
    centroids: tuple[str, np.ndarray],
    params: LinkParams,
    run: str,
) -> tuple[CrawlLinks, list[RouteTask]]:
    """One route task per data file of the embeddings of crawls <= `crawl`; the centroids cut into contiguous
    ranges holding ~`task_vectors` routed rows each (at least `tasks`), one link task per range."""
    where = And(EqualTo("model_sha256", model_sha256), LessThanOrEqual("crawl", crawl))
    slices = lakehouse.slices(DEDUP_EMBEDDINGS, embeddings_snapshot, where, ("doc_id", "crawl", "vector"))
    version, c = centroids
    routed = sum(s.max_rows for s in slices) * params.probes  # from the manifests: nothing read
    parts = min(len(c), max(params.tasks, math.ceil(routed / params.task_vectors)))
    bounds = tuple(int(x) for x in np.linspace(0, len(c), parts + 1).astype(int))
    # under data/, as near dedup's scratch: an S3 Tables bucket refuses writes elsewhere in a table
    scratch = f"{lakehouse.table(DEDUP_SEMANTIC_LINKS).location().rstrip('/')}/data/scratch/{run}/{crawl}"
    shared = CrawlLinks(lakehouse, crawl, model_sha256, version, c, params, bounds, scratch)
    return shared, [RouteTask(i, shared, s) for i, s in enumerate(slices)]


def route_task(task: RouteTask) -> TaskResult:
    """Each row of the slice, with its `probes` nearest centroids, to the partition of each of them (once per
    partition), streamed a batch at a time (`shuffle.PartWriter`). Stats: rows routed."""
    c, schema = task.crawl, routed_schema(task.crawl.params.probes)
    writer = shuffle.PartWriter(c.lakehouse.file_io(c.scratch), task.path, schema)
    bounds, rows = np.asarray(c.bounds), 0
    for batch in c.lakehouse.read_slice(task.slice):
        if not batch.num_rows:
            continue
        probes = nearest_centroids(vectors_from_binary(batch.column("vector")), c.centroids, c.params.probes)
        parts = np.searchsorted(bounds, probes, "right") - 1
        flat = pa.array(probes.ravel(), pa.int32())
        columns = [
            shuffle.keys(batch.column("crawl"), batch.column("doc_id")),
            pc.equal(batch.column("crawl"), c.crawl),
            batch.column("vector").cast(pa.large_binary()),
            pa.FixedSizeListArray.from_arrays(flat, probes.shape[1]),
        ]
        table = pa.Table.from_arrays(columns, schema=schema)
        for j in range(parts.shape[1]):
            first = np.flatnonzero((parts[:, :j] != parts[:, j : j + 1]).all(axis=1))  # once per partition
            writer.write(table.take(pa.array(first)), parts[first, j])
        rows += batch.num_rows
    writer.close()
    return TaskResult(task.index, (), {"routed": rows})


def link_tasks(shared: CrawlLinks, routes: Sequence[RouteTask], run: str) -> list[LinkTask]:
    """One link task per partition of the centroids, reading every route task's file."""
    paths, partition = tuple(t.path for t in routes), {"crawl": shared.crawl}
    return [
        LinkTask(p, shared, paths, shared.lakehouse.output(DEDUP_SEMANTIC_LINKS, partition, run, p))
        for p in range(len(shared.bounds) - 1)
    ]


@dataclass(frozen=True)
class Bucketed:
    """The routed rows of crawls <= k in a task's buckets, in key order: canonical keys, crawl-k flags, vectors,
    probes."""

    keys: np.ndarray  # "crawl NUL doc_id", object array
    new: np.ndarray
    vectors: np.ndarray  # float16: half the memory; compared in float32
    probes: np.ndarray


def bucketed(task: LinkTask) -> Bucketed:
    """The rows routed to the task's partition, sorted by key (so nothing depends on the route files' order)."""
    c = task.crawl
    t = shuffle.read_part(c.lakehouse.file_io(c.scratch), task.routed, task.index, routed_schema(c.params.probes))
    if not t.num_rows:
        return Bucketed(np.zeros(0, object), np.zeros(0, bool), np.zeros((0, 1), np.float16), np.zeros((0, 1)))
    t = t.take(pc.sort_indices(t, [("key", "ascending")]))
    # float16 a batch at a time: the float32 matrix of the whole partition would double the task's memory
    vectors = np.concatenate([vectors_from_binary(b.column("vector")).astype(np.float16) for b in t.to_batches()])
    probes = np.asarray(t.column("probes").combine_chunks().flatten()).reshape(t.num_rows, -1)
    keys = np.array(t.column("key").to_pylist(), object)
    return Bucketed(keys, t.column("new").to_numpy(), vectors, probes)


def bucket_members(b: Bucketed, lo: int, hi: int) -> Iterator[tuple[int, np.ndarray]]:
    """(bucket, its rows ascending) for the buckets [lo, hi), from one sort of the rows' probes."""
    flat = b.probes.ravel()
    order = np.argsort(flat, kind="stable")
    rows, sorted_buckets = order // b.probes.shape[1], flat[order]
    for bucket in range(lo, hi):
        s, e = np.searchsorted(sorted_buckets, [bucket, bucket + 1])
        yield bucket, np.sort(rows[s:e])


# --- a bucket cut into leaves ---------------------------------------------------------------------------------


def bucket_leaves(vectors: np.ndarray, ranks: np.ndarray, params: LinkParams, depth: int = 0) -> list[np.ndarray]:
    """The leaves of one bucket (`vectors`: its members', `ranks`: their seeded sample ranks) as lists of member
    rows, ascending, in a fixed order. At most `max_bucket` rows: one leaf. More: a spherical k-means fitted on
    the FIT_PER_CHILD x children members of smallest rank (in rank order: a function of the members, not of
    their order) into 2 x probes x n / max_bucket children (~max_bucket / 2 rows each), each row in its `probes`
    nearest, each child cut again, MAX_DEPTH levels at most. A cut whose children's sizes promise no fewer
    cosines than the whole bucket (sum of their squares >= n^2: unbalanced children, 2 per row, or near-identical
    rows) is not made: measured at 1M, cuts just above max_bucket cost 1.6x the cosines they were to save."""
    n = len(vectors)
    if n <= params.max_bucket or depth == MAX_DEPTH:
        return [np.arange(n)]
    k = math.ceil(2 * params.probes * n / params.max_bucket)
    sample = np.argsort(ranks, kind="stable")[: FIT_PER_CHILD * k]
    children = fit_centroids(vectors[sample], k, params.iterations, params.seed + depth + 1)
    near = nearest_centroids(vectors, children, min(params.probes, len(children)))
    members = [np.flatnonzero((near == child).any(axis=1)) for child in range(len(children))]
    if sum(len(m) ** 2 for m in members) >= n * n:  # the children would cost more cosines than the whole bucket
        return [np.arange(n)]
    return [
        rows[leaf]
        for rows in members
        if len(rows)
        for leaf in bucket_leaves(vectors[rows], ranks[rows], params, depth + 1)
    ]


def leaf_sets(leaves: Sequence[np.ndarray], n: int) -> np.ndarray:
    """Each of n members' leaves, ascending, padded with len(leaves): (n, most leaves of one member)."""
    member = np.concatenate(leaves) if leaves else np.zeros(0, np.int64)
    leaf = np.repeat(np.arange(len(leaves)), [len(x) for x in leaves])
    order = np.lexsort((leaf, member))
    member, leaf = member[order], leaf[order]
    counts = np.bincount(member, minlength=n)
    out = np.full((n, max(int(counts.max(initial=0)), 1)), len(leaves), np.int64)
    out[member, np.arange(len(member)) - np.repeat(np.cumsum(counts) - counts, counts)] = leaf
    return out


def smallest_shared(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row-wise: the smallest value in both row i of x and row i of y (1 << 30 when there is none)."""
    return np.where(x[:, :, None] == y[:, None, :], x[:, :, None], 1 << 30).min(axis=(1, 2))


@dataclass(frozen=True)
class Leaves:
    """One bucket's members (rows of the task, ascending) and their vectors, its leaves (member positions) and
    each member's leaves."""

    bucket: int
    members: np.ndarray
    vectors: np.ndarray  # float32, converted once per bucket: a member of a cut bucket is in several leaves
    leaves: list[np.ndarray]
    sets: np.ndarray


def leaves_of(b: Bucketed, lo: int, hi: int, params: LinkParams) -> Iterator[Leaves]:
    """The buckets [lo, hi), each cut into its leaves."""
    for bucket, members in bucket_members(b, lo, hi):
        v = b.vectors[members].astype(np.float32)
        if len(members) > params.max_bucket:
            leaves = bucket_leaves(v, sample_rank(list(b.keys[members]), params.seed), params)
        else:
            leaves = [np.arange(len(members))]
        yield Leaves(bucket, members, v, leaves, leaf_sets(leaves, len(members)))


_CELLS = 4 << 20  # cells of a leaf's similarity matrix computed at a time, and candidate pairs at most


def leaf_pairs(b: Bucketed, cut: Leaves, leaf: int, threshold: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(later, earlier) row pairs of one leaf whose float32 cosine is near `threshold` or above: the later row
    in crawl k, each pair once: only in the smallest bucket the two rows share and the smallest leaf of it."""
    local = cut.leaves[leaf]
    later = local[b.new[cut.members[local]]]
    v = cut.vectors[local]
    step = max(1, min(_BLOCK, _CELLS // max(len(local), 1)))  # a leaf of near-identical rows: all candidates
    for lo in range(0, len(later), step):
        mine = later[lo : lo + step]
        i, j = np.nonzero(cut.vectors[mine] @ v.T >= threshold - _MARGIN)
        la, le = mine[i], local[j]
        a, e = cut.members[la], cut.members[le]
        # both in crawl k: keep the pair once, with the later key as `a`
        keep = (a != e) & (~b.new[e] | (b.keys[e] < b.keys[a]))
        la, le, a, e = la[keep], le[keep], a[keep], e[keep]
        own = (smallest_shared(b.probes[a], b.probes[e]) == cut.bucket) & (
            smallest_shared(cut.sets[la], cut.sets[le]) == leaf
        )
        yield a[own], e[own]


def pair_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosines of two (n, dim) arrays of unit vectors, from each pair's two rows alone (float64, a fixed
    summation order)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64)).sum(axis=1)


def bucket_links(b: Bucketed, cut: Leaves, threshold: float) -> Iterator[tuple[np.ndarray, ...]]:
    """(later rows, earlier rows, cosines) of the links found in one cut bucket, each link once."""
    for leaf in range(len(cut.leaves)):
        for later, earlier in leaf_pairs(b, cut, leaf, threshold):
            for k in range(0, len(later), _PAIRS):  # the float64 rows of at most _PAIRS pairs at a time
                a, e = later[k : k + _PAIRS], earlier[k : k + _PAIRS]
                cos = pair_cosines(b.vectors[a], b.vectors[e])
                hit = cos >= threshold
                if hit.any():
                    yield a[hit], e[hit], cos[hit]


def links_in_buckets(b: Bucketed, lo: int, hi: int, params: LinkParams) -> Iterator[tuple[np.ndarray, ...]]:
    """(later rows, earlier rows, cosines) of the links found in buckets [lo, hi), each link once."""
    for cut in leaves_of(b, lo, hi, params):
        yield from bucket_links(b, cut, params.threshold)


def leaf_stats(b: Bucketed, cut: Leaves) -> dict[str, int]:
    """What one bucket costs: cosines (crawl-k members x members, per leaf; and were it not cut), its size, its
    largest leaf."""
    sizes = np.array([len(x) for x in cut.leaves], np.int64)
    new = np.array([b.new[cut.members[x]].sum() for x in cut.leaves], np.int64)
    return {
        "comparisons": int((sizes * new).sum()),
        # what comparing within the whole bucket would cost: the cut's saving, measured
        "uncut_comparisons": len(cut.members) * int(b.new[cut.members].sum()),
        "largest_bucket": len(cut.members),
        "largest_leaf": int(sizes.max(initial=0)),
        "cut_buckets": int(len(cut.leaves) > 1),
    }


SUMMED = ("documents", "comparisons", "uncut_comparisons", "links", "cut_buckets")  # the other stats are largest values


def run_task(task: LinkTask) -> TaskResult:
    """The links of the task's buckets, written as data files; never commits. Stats: rows held, cosines the
    leaves cost, links, buckets cut, the largest bucket and leaf."""
    b, params = bucketed(task), task.crawl.params
    writer, stats = FileWriter(task.out), {"documents": len(b.keys), "links": 0}
    for cut in leaves_of(b, task.lo, task.hi, params):
        for key, value in leaf_stats(b, cut).items():
            stats[key] = stats.get(key, 0) + value if key in SUMMED else max(stats.get(key, 0), value)
        for later, earlier, cos in bucket_links(b, cut, params.threshold):
            writer.write(link_table(b.keys[later], b.keys[earlier], cos, task.crawl))
            stats["links"] += len(later)
    return TaskResult(task.index, (writer.close(),), stats)


def link_table(later: np.ndarray, earlier: np.ndarray, cosine: np.ndarray, c: CrawlLinks) -> pa.Table:
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
            "threshold": np.full(n, c.params.threshold),
            "model_sha256": [c.model_sha256] * n,
            "centroid_version": [c.centroid_version] * n,
        },
        schema=DEDUP_SEMANTIC_LINKS.arrow_schema,
    ).sort_by([("doc_id", "ascending"), ("linked_crawl", "ascending"), ("linked_doc_id", "ascending")])


def commit(
    lakehouse: Lakehouse, crawl: str, results: Sequence[TaskResult], provenance: Provenance
) -> Mapping[object, CommitResult]:
    """Replace the crawl's partition of dedup.semantic_links with the tasks' files (one transaction)."""
    return lakehouse.commit(results, {DEDUP_SEMANTIC_LINKS: {"crawl": crawl}}, {DEDUP_SEMANTIC_LINKS: provenance})


def link_crawl(
    planned: tuple[CrawlLinks, Sequence[RouteTask]], executor, run: str, provenance: Provenance
) -> tuple[list[TaskResult], Mapping[object, CommitResult]]:
    """One crawl's links from its `plan`: route and link tasks on `executor`, one commit, then the scratch files
    removed. (link task results, commits)."""
    shared, routes = planned
    executor.map(route_task, routes)
    results = executor.map(run_task, link_tasks(shared, routes, run))
    commits = commit(shared.lakehouse, shared.crawl, results, provenance)
    shuffle.delete_all(shared.lakehouse.file_io(shared.scratch), [t.path for t in routes])
    return results, commits


def totals(results: Sequence[TaskResult]) -> dict[str, int]:
    """The tasks' stats: sums, and the largest bucket and leaf (a bucket belongs to one task)."""
    out = {k: sum(int(r.stats.get(k, 0)) for r in results) for k in SUMMED}
    largest = {k: max((int(r.stats.get(k, 0)) for r in results), default=0) for k in ("largest_bucket", "largest_leaf")}
    return {**out, **largest}
