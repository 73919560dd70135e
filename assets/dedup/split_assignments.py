"""Split assignments as data: each kept document's split cluster and split, committed crawl by crawl in crawl
order to `dedup.split_assignments`; an earlier crawl's rows are read, never recomputed. No Dagster.

The rule for crawl k (`assign_crawl`), over its kept documents in doc_id order:
1. must-links (unlimited): documents of one near/exact-duplicate cluster (`splits.cluster_ids`) are one
   component; a component whose duplicate cluster already has rows in an earlier crawl joins that row's split
   cluster.
2. semantic links (`dedup.semantic_links` of crawl k) count only between mutual top-k neighbours: each end's
   links in crawl k's set ranked by cosine (then the other end), a link kept when it is within the `mutual_top_k`
   best of both ends. A hub document (a template, a page close to many) cannot fan out.
3. kept links are applied best first (cosine descending, then the pair): a link joins two components of crawl k
   when their sizes sum to at most `semantic_cap`; a component of crawl k joins an earlier cluster when that
   cluster's size (all its documents so far) plus the component's stays at most `semantic_cap`; two earlier
   clusters never merge. So semantic links can never grow a cluster past the cap: no chaining collapse; only
   must-links (near duplicates) make larger clusters.
A new cluster is named by the duplicate cluster id of its first document (which stays its name, hence its split,
when that document is erased). Every decision reads crawl k's rows and the stored rows of earlier crawls only,
so adding a crawl changes no earlier row.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import And, EqualTo, LessThan, LessThanOrEqual

from assets.dedup import semantic_links
from assets.dedup.clustering import UnionFind
from assets.dedup.semantic_clusters import doc_keys
from assets.dedup.semantic_links import LinkParams
from assets.dedup.splits import SPLIT_SEED, TEST_FRACTION, VALIDATION_FRACTION, SplitParams, cluster_ids, split_of
from assets.embeddings import model_sha256
from assets.knobs import knob
from iceberg_catalog import CommitResult, Lakehouse, Provenance, TableDef
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    DEDUP_EMBEDDINGS,
    DEDUP_NEAR_DUPLICATES,
    DEDUP_SEMANTIC_CENTROIDS,
    DEDUP_SEMANTIC_LINKS,
    DEDUP_SPLIT_ASSIGNMENTS,
)

MUTUAL_TOP_K = 5
SEMANTIC_CAP = 32
# what the step reads, pinned once per run
INPUTS = (CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES, DEDUP_NEAR_DUPLICATES, DEDUP_EMBEDDINGS)


@dataclass(frozen=True)
class SplitClusterParams:
    """The links (how found, from which cosine), the rule joining clusters by them, and the split fractions."""

    links: LinkParams = LinkParams()
    mutual_top_k: int = knob(MUTUAL_TOP_K, "a semantic link counts only between mutual top-k neighbours")
    semantic_cap: int = knob(SEMANTIC_CAP, "no semantic link grows a cluster past this many documents")
    validation: float = knob(VALIDATION_FRACTION, "fraction of clusters in validation (the stored `split`)")
    test: float = knob(TEST_FRACTION, "fraction of clusters in test (the stored `split`)")
    split_seed: int = knob(SPLIT_SEED, "seed of the split assignment (the stored `split`)")

    def __post_init__(self) -> None:
        for name in ("mutual_top_k", "semantic_cap"):
            if getattr(self, name) < 1:
                raise ValueError(f"SplitClusterParams.{name} must be >= 1, got {getattr(self, name)}")
        self.split_params()  # the fractions' own check

    def split_params(self) -> SplitParams:
        """The split fractions and seed the stored `split` column is computed with."""
        return SplitParams(self.validation, self.test, self.split_seed, self.links.threshold)

    def rule(self, model: str, centroid_version: str) -> str:
        """The stored `rule`: everything a split cluster id depends on."""
        values = {
            "threshold": self.links.threshold,
            "mutual_top_k": self.mutual_top_k,
            "semantic_cap": self.semantic_cap,
            "model_sha256": model,
            "centroid_version": centroid_version,
        }
        return json.dumps(values, sort_keys=True)

    def hashed(self) -> dict:
        """What changes the stored rows (the task counts do not)."""
        links = {k: v for k, v in vars(self.links).items() if k not in ("tasks", "task_vectors")}
        return {**{k: v for k, v in vars(self).items() if k != "links"}, "links": links}


# --- the rule (pure) ------------------------------------------------------------------------------------------


def mutual_top_k(a: np.ndarray, b: np.ndarray, cosine: np.ndarray, k: int) -> np.ndarray:
    """Which links (a[i], b[i]) are within the k best (cosine descending, then the other end) of both ends."""
    m = len(a)
    if not m:
        return np.zeros(0, bool)
    ends, others, cos = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([cosine, cosine])
    order = np.lexsort((others, -cos, ends))
    sorted_ends = ends[order]
    starts = np.flatnonzero(np.r_[True, sorted_ends[1:] != sorted_ends[:-1]])
    rank = np.empty(2 * m, np.int64)
    rank[order] = np.arange(2 * m) - np.repeat(starts, np.diff(np.r_[starts, 2 * m]))
    ok = rank < k
    return ok[:m] & ok[m:]


def assign_crawl(
    units: Sequence[str],
    unit_cluster: Mapping[str, str],
    earlier_size: Mapping[str, int],
    earlier_cluster: Sequence[str],
    links: tuple[np.ndarray, np.ndarray, np.ndarray],
    top_k: int,
    cap: int,
) -> list[str]:
    """Split cluster ids of one crawl's documents (module docstring). Documents are nodes 0..n-1 (doc_id order)
    with duplicate cluster `units[i]`; earlier documents linked to are nodes n + j, in split cluster
    `earlier_cluster[j]`; `links` = (a, b, cosine), a < n, b != a; `unit_cluster`/`earlier_size`: the earlier
    crawls' duplicate cluster -> split cluster and split cluster -> documents."""
    n = len(units)
    uf, first_of = UnionFind(n), {}
    for x, u in enumerate(units):
        uf.union(first_of.setdefault(u, x), x)
    size = np.bincount([uf.find(x) for x in range(n)], minlength=n).astype(np.int64)
    grown = Counter(earlier_size)
    attached: dict[int, str] = {}  # root of a component of this crawl -> the earlier cluster it joined
    for u, x in first_of.items():
        if u in unit_cluster:
            attached[x] = unit_cluster[u]
            grown[unit_cluster[u]] += int(size[x])
    a, b, cos = (np.asarray(v) for v in links)
    keep = mutual_top_k(a, b, cos, top_k)
    a, b, cos = a[keep], b[keep], cos[keep]
    for i in np.lexsort((b, a, -cos)):
        ra = uf.find(int(a[i]))
        rb = uf.find(int(b[i])) if b[i] < n else None
        ta = attached.get(ra)
        tb = earlier_cluster[int(b[i]) - n] if rb is None else attached.get(rb)
        if ra == rb or (ta is not None and tb is not None):
            continue  # one component already, or two earlier clusters (never merged)
        if ta is None and tb is None:
            if size[ra] + size[rb] <= cap:
                uf.union(ra, rb)
                size[uf.find(ra)] = size[ra] + size[rb]
            continue
        target, free = (ta, rb) if ta is not None else (tb, ra)
        if grown[target] + size[free] <= cap:
            attached[free] = target
            grown[target] += int(size[free])
    out = []
    for x in range(n):
        r = uf.find(x)
        out.append(attached.get(r, units[r]))  # the root is the component's first document
    return out


# --- one crawl, read and written ------------------------------------------------------------------------------


def crawl_rows(
    lakehouse: Lakehouse,
    crawl: str,
    pinned: Mapping[str, int | None],
    params: SplitClusterParams,
    model: str,
    centroid_version: str,
) -> pa.Table:
    """The split assignment rows of `crawl`, from its kept documents at the pinned snapshots, its links and the
    stored rows of earlier crawls."""
    docs = lakehouse.scan_at(
        CURATED_DOCUMENTS,
        pinned[CURATED_DOCUMENTS.identifier],
        ("doc_id", "segment"),
        And(EqualTo("crawl", crawl), EqualTo("kept", True)),
    ).sort_by("doc_id")
    doc_ids = docs.column("doc_id").to_pylist()
    up_to = LessThanOrEqual("crawl", crawl)  # an exact duplicate's canonical may be in an earlier crawl
    near = lakehouse.scan_at(
        DEDUP_NEAR_DUPLICATES, pinned[DEDUP_NEAR_DUPLICATES.identifier], ("doc_id", "cluster_id"), up_to
    )
    exact = lakehouse.scan_at(
        CURATED_EXACT_DUPLICATES, pinned[CURATED_EXACT_DUPLICATES.identifier], ("doc_id", "duplicate_of"), up_to
    )
    unit_of = cluster_ids(doc_ids, dict(zip(*near.to_pydict().values())), dict(zip(*exact.to_pydict().values())))
    units = [unit_of[d] for d in doc_ids]
    earlier = plain_strings(
        lakehouse.scan(
            DEDUP_SPLIT_ASSIGNMENTS,
            ("doc_id", "crawl", "duplicate_cluster_id", "split_cluster_id"),
            LessThan("crawl", crawl),
        )
    )
    links = crawl_links(lakehouse, crawl, params.links.threshold, model, centroid_version)
    pairs, earlier_cluster = link_nodes(pa.array(doc_ids, pa.string()), crawl, earlier, links)
    # only the earlier clusters this crawl can touch: its duplicate clusters' and its links' (bounded memory)
    mine = earlier.filter(pc.is_in(earlier.column("duplicate_cluster_id"), pa.array(sorted(set(units)), pa.string())))
    unit_cluster = dict(zip(*(mine.column(c).to_pylist() for c in ("duplicate_cluster_id", "split_cluster_id"))))
    touched = pa.array(sorted(set(unit_cluster.values()) | set(earlier_cluster)), pa.string())
    sizes = pc.value_counts(
        earlier.column("split_cluster_id").filter(pc.is_in(earlier.column("split_cluster_id"), touched))
    )
    earlier_size = {v["values"]: v["counts"] for v in sizes.to_pylist()}
    clusters = assign_crawl(
        units, unit_cluster, earlier_size, earlier_cluster, pairs, params.mutual_top_k, params.semantic_cap
    )
    split_params = params.split_params()
    n = len(doc_ids)
    return pa.table(
        {
            "doc_id": doc_ids,
            "crawl": [crawl] * n,
            "segment": docs.column("segment"),
            "duplicate_cluster_id": units,
            "split_cluster_id": clusters,
            "split": [split_of(c, split_params) for c in clusters],
            "split_params": [json.dumps(split_params.as_dict(), sort_keys=True)] * n,
            "rule": [params.rule(model, centroid_version)] * n,
        },
        schema=DEDUP_SPLIT_ASSIGNMENTS.arrow_schema,
    )


def crawl_links(lakehouse: Lakehouse, crawl: str, threshold: float, model: str, centroid_version: str) -> pa.Table:
    """The stored links of `crawl` made with this threshold, model and centroids."""
    where = And(
        And(EqualTo("crawl", crawl), EqualTo("threshold", threshold)),
        And(EqualTo("model_sha256", model), EqualTo("centroid_version", centroid_version)),
    )
    return plain_strings(
        lakehouse.scan(DEDUP_SEMANTIC_LINKS, ("doc_id", "linked_doc_id", "linked_crawl", "cosine"), where)
    )


def plain_strings(table: pa.Table) -> pa.Table:
    """`table` with its large_string columns (as Iceberg reads strings) as string: one type for the lookups."""
    fields = [pa.field(f.name, pa.string()) if f.type == pa.large_string() else f for f in table.schema]
    return table.cast(pa.schema(fields))


def link_nodes(doc_ids: pa.Array, crawl: str, earlier: pa.Table, links: pa.Table):
    """Links as node pairs for `assign_crawl`: ((a, b, cosine), split clusters of the earlier nodes n + j). Earlier
    documents are numbered in (crawl, doc_id) order, so nothing depends on the order of the link rows. A link to a
    document without a row (erased, or no longer kept) is dropped."""
    n = len(doc_ids)
    a = pc.index_in(links.column("doc_id"), value_set=doc_ids)
    same = pc.equal(links.column("linked_crawl"), crawl)
    b_same = pc.index_in(links.column("linked_doc_id"), value_set=doc_ids)
    keys = pc.binary_join_element_wise(earlier.column("crawl"), earlier.column("doc_id"), "\0")
    linked = pc.binary_join_element_wise(links.column("linked_crawl"), links.column("linked_doc_id"), "\0")
    j = pc.index_in(linked, value_set=keys)
    b_earlier = np.asarray(j.fill_null(-1), np.int64)
    ok = pc.and_(pc.is_valid(a), pc.if_else(same, pc.is_valid(b_same), pc.is_valid(j))).to_numpy(zero_copy_only=False)
    used = np.unique(b_earlier[ok & ~same.to_numpy(zero_copy_only=False)])
    order = np.argsort(np.asarray(keys.take(pa.array(used, pa.int64())).to_pylist(), object), kind="stable")
    used = used[order]
    node_of = np.full(max(len(earlier), 1), -1, np.int64)
    node_of[used] = n + np.arange(len(used))
    b = np.where(same.to_numpy(zero_copy_only=False), np.asarray(b_same.fill_null(-1), np.int64), node_of[b_earlier])
    a = np.asarray(a.fill_null(-1), np.int64)
    cos = links.column("cosine").to_numpy()
    earlier_cluster = earlier.column("split_cluster_id").take(pa.array(used, pa.int64())).to_pylist()
    return (a[ok], b[ok], cos[ok]), earlier_cluster


# --- every pending crawl, in crawl order ----------------------------------------------------------------------


def pending_crawls(lakehouse: Lakehouse, documents_snapshot: int | None, rule: str, split_params: str) -> list[str]:
    """The crawls to (re)compute: from the first crawl with a kept document that has no row under this rule and
    split parameters (a new crawl; or a new segment of an assigned one), every later crawl with kept documents
    (each crawl's rows depend on the earlier crawls' rows). Crawls without a kept document have nothing to assign."""
    kept = lakehouse.scan_at(CURATED_DOCUMENTS, documents_snapshot, ("doc_id", "crawl"), EqualTo("kept", True))
    where = And(EqualTo("rule", rule), EqualTo("split_params", split_params))
    stored = set(doc_keys(lakehouse.scan(DEDUP_SPLIT_ASSIGNMENTS, ("doc_id", "crawl"), where)))
    missing = [k.split("\0", 1)[0] for k in doc_keys(kept) if k not in stored]
    crawls = sorted(set(kept.column("crawl").to_pylist()))
    return [c for c in crawls if c >= min(missing)] if missing else []


def build(
    lakehouse: Lakehouse, params: SplitClusterParams, executor, run: str, provenance: Mapping[TableDef, Provenance]
) -> dict:
    """Fit (or read) the centroids, then for each pending crawl in order: its links (tasks on `executor`, one
    commit), then its split assignments (one commit). Stats per crawl and the commits."""
    pinned = lakehouse.snapshot_ids(INPUTS)
    model = model_sha256()
    embeddings_at = pinned[DEDUP_EMBEDDINGS.identifier]
    version, centroids, fitted = semantic_links.ensure_centroids(
        lakehouse, embeddings_at, model, params.links, provenance[DEDUP_SEMANTIC_CENTROIDS]
    )
    rule, split_json = params.rule(model, version), json.dumps(params.split_params().as_dict(), sort_keys=True)
    stats: dict = {"centroid_version": version, "centroids_fitted": fitted is not None, "crawls": {}}
    commits: dict[TableDef, CommitResult] = {DEDUP_SEMANTIC_CENTROIDS: fitted} if fitted else {}
    for crawl in pending_crawls(lakehouse, pinned[CURATED_DOCUMENTS.identifier], rule, split_json):
        planned = semantic_links.plan(lakehouse, crawl, embeddings_at, model, (version, centroids), params.links, run)
        results, linked = semantic_links.link_crawl(planned, executor, run, provenance[DEDUP_SEMANTIC_LINKS])
        commits.update(linked)
        rows = crawl_rows(lakehouse, crawl, pinned, params, model, version)
        writer = lakehouse.writer(DEDUP_SPLIT_ASSIGNMENTS, {"crawl": crawl})
        writer.write(rows)
        commits[DEDUP_SPLIT_ASSIGNMENTS] = writer.commit(provenance[DEDUP_SPLIT_ASSIGNMENTS])
        stats["crawls"][crawl] = {**semantic_links.totals(results), "assigned": rows.num_rows}
    return {"stats": stats, "commits": commits, "pinned": pinned}
