"""Near dedup, stages 4-5 (see `assets.dedup.near`): connected components as min-label propagation over the
verified edges (an edge within a crawl carries labels both ways, into a later crawl only forward), then the
rows of `dedup.near_duplicates` per cluster partition. Every function here runs in a task."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import (
    LessThan,
)

from assets.dedup.near_plan import (
    ADJACENCY,
    DECISION_NEAR_DUPLICATE,
    LABELS,
    MESSAGES,
    NODES,
    NearDuplicatePlan,
    Task,
    fs,
    read_matching,
    read_scratch,
    task_result,
    task_start,
    unique,
)
from assets.dedup.shuffle import keys, partition_of, split_keys, write_parts
from iceberg_catalog import FileWriter, TaskResult
from iceberg_catalog.schemas import (
    DEDUP_NEAR_DUPLICATES,
)


def write_graph(p: NearDuplicatePlan, index: int, edges: pa.Table) -> dict[str, str]:
    """The edges as labels will travel (partitioned by source): a -> b always, b -> a only within one crawl
    (a later crawl never changes an earlier cluster); and their documents, partitioned by document."""
    a, b = edges["a"].combine_chunks(), edges["b"].combine_chunks()
    same = pc.equal(split_keys(a)[0], split_keys(b)[0])
    adjacency = pa.table({"src": pa.concat_arrays([a, b.filter(same)]), "dst": pa.concat_arrays([b, a.filter(same)])})
    nodes = pa.table(
        {
            "node": pa.concat_arrays([a, b]),
            "segment": pa.concat_arrays([edges["a_seg"].combine_chunks(), edges["b_seg"].combine_chunks()]),
        }
    )
    io = fs(p)
    return {
        "adjacency": write_parts(
            io, p.scratch_path("adjacency", index), adjacency, partition_of(adjacency["src"], p.parts)
        ),
        "nodes": write_parts(io, p.scratch_path("nodes", index), nodes, partition_of(nodes["node"], p.parts)),
    }


def labels_task(t: Task) -> TaskResult:
    """Round 0: the documents of partition `t.index` with their first label (a document of a frozen crawl: its
    stored cluster; any other: itself), and a message along every edge leaving them."""
    p, start = t.plan, task_start()
    nodes, nbytes = read_scratch(p, t.inputs[1], t.index, NODES)
    nodes = unique(nodes, ["node", "segment"]).sort_by("node")
    frozen, read = frozen_labels(p, nodes["node"])
    labels = nodes.append_column("label", pc.coalesce(frozen, nodes["node"]))
    adjacency, read_adj = read_scratch(p, t.inputs[0], t.index, ADJACENCY)
    return send(t, start, nbytes + read + read_adj, labels, adjacency, labels["node"], changed=labels.num_rows)


def frozen_labels(p: NearDuplicatePlan, nodes: pa.ChunkedArray) -> tuple[pa.Array, int]:
    """The stored cluster (as a key) of each node in a crawl before the first recomputed one, null for the
    others: such nodes are the earlier ends of edges into recomputed crawls, and their rows never change."""
    crawls, doc_ids = split_keys(nodes)
    earlier = pc.less(crawls, p.first)
    out = pa.nulls(len(nodes), pa.string())
    ids = pc.unique(doc_ids.filter(earlier))
    if not len(ids):
        return out, 0
    columns = ("doc_id", "crawl", "cluster_id", "cluster_crawl")
    snapshot = p.snapshot(DEDUP_NEAR_DUPLICATES)
    where = LessThan("crawl", p.first)
    rows, nbytes = read_matching(p.lakehouse, DEDUP_NEAR_DUPLICATES, snapshot, columns, where, "doc_id", ids)
    stored = keys(rows["crawl"], rows["doc_id"])
    label = keys(rows["cluster_crawl"], rows["cluster_id"])
    at = pc.index_in(nodes, value_set=stored)
    return pc.take(label, at), nbytes


def propagate_task(t: Task) -> TaskResult:
    """One round for partition `t.index`: each document takes the smallest label it was sent, if smaller, and
    sends it along its edges."""
    p, start = t.plan, task_start()
    labels, nbytes = read_scratch(p, t.inputs[1][t.index : t.index + 1], 0, LABELS)
    messages, read = read_scratch(p, t.inputs[2], t.index, MESSAGES)
    best = messages.group_by("dst").aggregate([("label", "min")])
    offered = pc.take(best["label_min"], pc.index_in(labels["node"], value_set=best["dst"]))
    smaller = pc.fill_null(pc.less(offered, labels["label"]), False)
    labels = labels.set_column(2, "label", pc.if_else(smaller, offered, labels["label"]))
    adjacency, read_adj = read_scratch(p, t.inputs[0], t.index, ADJACENCY)
    changed = labels["node"].filter(smaller)
    return send(t, start, nbytes + read + read_adj, labels, adjacency, changed, changed=len(changed))


def send(
    t: Task, start: tuple, nbytes: int, labels: pa.Table, adjacency: pa.Table, senders, changed: int
) -> TaskResult:
    """Write the partition's labels, and a message (dst, label) along every edge whose source is a sender."""
    p = t.plan
    out = adjacency.filter(pc.is_in(adjacency["src"], value_set=pa.array(senders, pa.string())))
    label = pc.take(labels["label"], pc.index_in(out["src"], value_set=labels["node"]))
    messages = pa.table({"dst": out["dst"], "label": label})
    io = fs(p)
    return task_result(
        t,
        start,
        nbytes,
        labels=write_parts(
            io, p.scratch_path(f"labels-{t.step}", t.index), labels, np.zeros(labels.num_rows, np.int64)
        ),
        outbox=write_parts(
            io, p.scratch_path(f"messages-{t.step}", t.index), messages, partition_of(messages["dst"], p.parts)
        ),
        changed=changed,
        messages=messages.num_rows,
    )


def regroup_task(t: Task) -> TaskResult:
    """The settled labels of partition `t.index`'s recomputed documents, sent to their cluster's partition."""
    p, start = t.plan, task_start()
    labels, nbytes = read_scratch(p, t.inputs[0][t.index : t.index + 1], 0, LABELS)
    labels = labels.filter(pc.greater_equal(split_keys(labels["node"])[0], p.first))
    path = write_parts(fs(p), p.scratch_path("clusters", t.index), labels, partition_of(labels["label"], p.parts))
    return task_result(t, start, nbytes, clusters=path)


def rows_task(t: Task) -> TaskResult:
    """The rows of the clusters of partition `t.index`: each recomputed document whose cluster had more than one
    member once its crawl was added, with that size; written as data files, one per crawl."""
    p, start = t.plan, task_start()
    nodes, nbytes = read_scratch(p, t.inputs[0], t.index, LABELS)
    base, read = earlier_sizes(p, nodes["label"])
    rows = near_duplicate_rows(nodes, base)
    files, by_crawl = [], Counter()
    for crawl in pc.unique(rows["crawl"]).to_pylist() if rows.num_rows else []:
        part = rows.filter(pc.equal(rows["crawl"], crawl)).sort_by("doc_id")
        writer = FileWriter(p.lakehouse.output(DEDUP_NEAR_DUPLICATES, {"crawl": crawl}, p.run, t.index))
        writer.write(part)
        files.append(writer.close())
        by_crawl[crawl] = int(pc.sum(pc.is_valid(part["decision"])).as_py() or 0)
    clusters = pc.count_distinct(keys(rows["cluster_crawl"], rows["cluster_id"])).as_py() if rows.num_rows else 0
    result = task_result(t, start, nbytes + read, rows=rows.num_rows, by_crawl=dict(by_crawl), clusters=clusters)
    return TaskResult(t.index, tuple(files), result.stats)


def earlier_sizes(p: NearDuplicatePlan, labels: pa.ChunkedArray) -> tuple[dict[str, int], int]:
    """Members, before the first recomputed crawl, of each cluster whose canonical is in a frozen crawl: its
    stored rows, plus the canonical itself when it has no row (it was alone in its crawl)."""
    crawls, doc_ids = split_keys(pc.unique(labels))
    ids = doc_ids.filter(pc.less(crawls, p.first))
    if not len(ids):
        return {}, 0
    columns = ("cluster_id", "cluster_crawl", "decision")
    snapshot = p.snapshot(DEDUP_NEAR_DUPLICATES)
    where = LessThan("crawl", p.first)
    rows, nbytes = read_matching(p.lakehouse, DEDUP_NEAR_DUPLICATES, snapshot, columns, where, "cluster_id", ids)
    size = Counter(keys(rows["cluster_crawl"], rows["cluster_id"]).to_pylist())
    with_row = set(keys(rows["cluster_crawl"], rows["cluster_id"]).filter(pc.is_null(rows["decision"])).to_pylist())
    earlier = pc.unique(labels.filter(pc.less(split_keys(labels)[0], p.first))).to_pylist()
    return {k: size[k] + (0 if k in with_row else 1) for k in earlier}, nbytes


def near_duplicate_rows(nodes: pa.Table, base: Mapping[str, int]) -> pa.Table:
    """Rows of recomputed documents (node, segment, label = their canonical's key): a cluster's size as of a
    crawl is its members in that crawl and before; rows where it is more than one."""
    order = nodes.sort_by([("label", "ascending"), ("node", "ascending")])
    crawl, doc_id = split_keys(order["node"])
    cluster_crawl, cluster_id = split_keys(order["label"])
    label = order["label"].to_pylist()
    crawls = crawl.to_pylist()
    size = np.zeros(len(label), np.int64)
    start = 0
    for end in range(1, len(label) + 1):  # one cluster at a time: count its members per crawl, cumulatively
        if end < len(label) and label[end] == label[start]:
            continue
        per_crawl = Counter(crawls[start:end])
        running, as_of = base.get(label[start], 0), {}
        for c in sorted(per_crawl):
            running += per_crawl[c]
            as_of[c] = running
        size[start:end] = [as_of[c] for c in crawls[start:end]]
        start = end
    dup = pc.not_equal(order["node"], order["label"])
    rows = pa.table(
        {
            "doc_id": doc_id,
            "crawl": crawl,
            "segment": order["segment"],
            "decision": pc.if_else(dup, pa.scalar(DECISION_NEAR_DUPLICATE), pa.scalar(None, pa.string())),
            "cluster_id": cluster_id,
            "cluster_size": pa.array(size, pa.int32()),
            "duplicate_of": pc.if_else(dup, cluster_id, pa.scalar(None, pa.string())),
            "cluster_crawl": cluster_crawl,
        }
    )
    return rows.filter(pc.greater(rows["cluster_size"], 1))
