"""Near dedup, stages 1-3 (see `assets.dedup.near`): band rows scattered to (band, band-hash range) shards,
candidate pairs per shard, unique pairs per partition, and their verification (fetch the texts or signatures
the pairs need, compare in bounded batches). Every function here runs in a task, on the shard it is given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import (
    And,
    EqualTo,
)

from assets.dedup import bloom
from assets.dedup.clustering import MAX_ALL_PAIRS_BUCKET  # the oracle's star rule: the same buckets
from assets.dedup.minhash import exact_jaccard, shingles
from assets.dedup.near_components import write_graph
from assets.dedup.near_plan import (
    BAND_ROWS,
    MAX_SHINGLE_SETS,
    PAIRS,
    REQUESTS,
    VERIFY_BATCH,
    NearDuplicateParams,
    NearDuplicatePlan,
    Task,
    fs,
    iter_found,
    read_scratch,
    small,
    task_result,
    task_start,
    unique,
)
from assets.dedup.shuffle import Matcher, PartWriter, iter_part, keys, partition_of, ranges, split_keys, write_parts
from iceberg_catalog import TaskResult
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    DEDUP_MINHASH_SIGNATURES,
)

SCATTER_COLUMNS = ("doc_id", "crawl", "segment", "band", "band_hash")


def scatter_task(t: Task) -> TaskResult:
    """The band rows of some data files, streamed batch by batch, each to the partition of its (band, band-hash
    range): one read of dedup.minhash_bands in all, where a range filter could not skip anything (every row
    group spans the whole hash range). In an incremental run a task of an added crawl also builds the filter of
    its (band, hash) keys, and a task of an earlier crawl sends on only the rows that filter may hold
    (`assets.dedup.bloom`: the same pairs, without the earlier crawls' other rows)."""
    p, start = t.plan, task_start()
    writer = PartWriter(fs(p), p.scratch_path("bands", t.index), BAND_ROWS)
    keep = read_filter(p, t.inputs[0][0]) if t.inputs else None
    built = bloom.empty(t.filter_words) if t.filter_words else None
    read = 0
    for batch in p.lakehouse.read_slice(t.source):
        read += batch.num_rows
        if keep is not None:
            may = bloom.may_contain(keep, batch.column("band").to_numpy(), batch.column("band_hash").to_numpy())
            batch = batch.filter(pa.array(may))
        band, h = batch.column("band").to_numpy().astype(np.int64), batch.column("band_hash").to_numpy()
        if built is not None:
            bloom.add(built, band, h)
        rows = pa.table(
            {"key": keys(batch.column("crawl"), batch.column("doc_id")), "segment": batch.column("segment"), "h": h}
        )
        writer.write(rows, band * p.ranges + range_of(h, p.ranges))
    nbytes = sum(f.file.file_size_in_bytes for f in t.source.files)
    stats = {"bands": writer.close(), "rows_read": read, "rows_sent": writer.rows}
    if built is not None:
        stats["filter"] = write_filter(p, p.scratch_path("filter", t.index), built)
    return task_result(t, start, nbytes, **stats)


def merge_filters(p: NearDuplicatePlan, words: int, paths: Sequence[str]) -> str:
    """The union of the added crawls' filters, as one scratch file (the step process holds one filter: its size
    grows with the added crawls' band rows, not with the corpus)."""
    union = bloom.empty(words)
    for path in paths:  # one task's filter at a time
        bloom.union_into(union, read_filter(p, path))
    return write_filter(p, p.scratch_path("filter-all", 0), union)


def write_filter(p: NearDuplicatePlan, path: str, words: np.ndarray) -> str:
    """A filter as a scratch file of little-endian 64-bit words."""
    with fs(p).new_output(path).create(overwrite=True) as out:
        out.write(words.astype("<u8").tobytes())
    return path


def read_filter(p: NearDuplicatePlan, path: str) -> np.ndarray:
    """The filter a scratch file holds."""
    with fs(p).new_input(path).open() as f:
        return np.frombuffer(f.read(), "<u8").astype(np.uint64)


def range_of(h: np.ndarray, ranges: int) -> np.ndarray:
    """Which of `ranges` equal ranges of the signed 64-bit space each hash falls in (0 for the smallest)."""
    if ranges == 1:
        return np.zeros(len(h), np.int64)
    shifted = h.astype(np.int64).view(np.uint64) ^ np.uint64(1 << 63)  # order-preserving map to [0, 2^64)
    return np.minimum(shifted // np.uint64((1 << 64) // ranges), np.uint64(ranges - 1)).astype(np.int64)


def candidates_task(t: Task) -> TaskResult:
    """Pairs of documents sharing a hash of band `t.band` within its hash range (of every crawl; only pairs whose
    later document is in a recomputed crawl are kept), partitioned by their first document."""
    p, start = t.plan, task_start()
    rows, nbytes = read_scratch(p, t.inputs[0], t.index, BAND_ROWS)
    table = rows.sort_by([("h", "ascending"), ("key", "ascending")])
    i, j = bucket_pairs(table["h"].to_numpy())
    pairs = pa.table(
        {
            "a": table["key"].take(i),
            "b": table["key"].take(j),
            "a_seg": table["segment"].take(i),
            "b_seg": table["segment"].take(j),
        }
    )
    pairs = pairs.filter(pc.greater_equal(split_keys(pairs["b"])[0], p.first))
    path = write_parts(fs(p), p.scratch_path("candidates", t.index), pairs, partition_of(pairs["a"], p.parts))
    return task_result(t, start, nbytes, pairs=path, candidate_rows=pairs.num_rows)


def bucket_pairs(h: np.ndarray, max_all_pairs: int = MAX_ALL_PAIRS_BUCKET) -> tuple[np.ndarray, np.ndarray]:
    """Row pairs (i, j), i < j, of rows sorted by (hash, key) that share a hash: all pairs of a bucket of at
    most `max_all_pairs` rows, else its first row with each other row (a star)."""
    n = len(h)
    if n < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
    sizes = np.diff(np.r_[starts, n])
    out_i, out_j = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for size in np.unique(sizes[sizes > 1]).tolist():
        first = starts[sizes == size][:, None]
        if size <= max_all_pairs:
            i, j = np.triu_indices(size, k=1)
            out_i.append((first + i).ravel())
            out_j.append((first + j).ravel())
        else:
            out_i.append(np.repeat(first, size - 1, axis=1).ravel())
            out_j.append((first + np.arange(1, size)).ravel())
    return np.concatenate(out_i).astype(np.int64), np.concatenate(out_j).astype(np.int64)


def pairs_task(t: Task) -> TaskResult:
    """The unique candidate pairs of partition `t.index`. With verify="none" they are the edges; otherwise
    they wait for verification and each pair's documents are requested from their segment's partition."""
    p, start = t.plan, task_start()
    cand, nbytes = read_scratch(p, t.inputs[0], t.index, PAIRS)
    pairs = unique(cand, ["a", "b", "a_seg", "b_seg"]).sort_by([("a", "ascending"), ("b", "ascending")])
    if p.params.verify == "none":
        return task_result(t, start, nbytes, candidate_pairs=pairs.num_rows, **write_graph(p, t.index, pairs))
    ends = pa.table(
        {
            "key": pa.concat_arrays([pairs["a"].combine_chunks(), pairs["b"].combine_chunks()]),
            "segment": pa.concat_arrays([pairs["a_seg"].combine_chunks(), pairs["b_seg"].combine_chunks()]),
        }
    )
    ends = unique(ends, ["key", "segment"]).sort_by("key")
    requests = ends.append_column("part", pa.array(np.full(ends.num_rows, t.index, np.int64)))
    io = fs(p)
    return task_result(
        t,
        start,
        nbytes,
        candidate_pairs=pairs.num_rows,
        pairs=write_parts(io, p.scratch_path("pairs", t.index), pairs, np.zeros(pairs.num_rows, np.int64)),
        requests=write_parts(
            io, p.scratch_path("requests", t.index), requests, partition_of(requests["segment"], p.parts)
        ),
    )


def fetch_task(t: Task) -> TaskResult:
    """The texts (verify="exact") or signatures ("estimated") of the documents requested from the segments of
    partition `t.index`, sent to the pair partitions that asked: one segment at a time, its data files streamed a
    batch at a time. The task holds one segment's requests (a doc_id and a partition number each) and one batch,
    never a segment's texts or signatures, and a batch costs the same whatever the number of requests."""
    p, start = t.plan, task_start()
    by_segment, nbytes = requests_by_segment(p, t.inputs[0], t.index)
    source, column = feature_source(p.params)
    writer = PartWriter(fs(p), p.scratch_path("features", t.index), feature_schema(p.params))
    for crawl, segment in sorted(by_segment):
        asked = Requested.of(*by_segment.pop((crawl, segment)))
        where = And(EqualTo("crawl", crawl), EqualTo("segment", segment))
        found, read = iter_found(
            p.lakehouse, source, p.snapshot(source), ("doc_id", column), where, "doc_id", asked.ids
        )
        nbytes += read
        for batch, positions in found:
            rows, parts = asked.parts_of(positions)  # a document asked by several partitions goes to each
            batch = batch.take(pa.array(rows))
            crawls = pa.repeat(pa.scalar(crawl, pa.string()), batch.num_rows)
            writer.write(
                pa.table({"key": keys(crawls, batch.column(0)), "value": batch.column(1), "part": parts}), parts
            )
    return task_result(t, start, nbytes, features=writer.close())


def requests_by_segment(
    p: NearDuplicatePlan, paths: Sequence[str], part: int
) -> tuple[dict[tuple[str, str], tuple[pa.Array, np.ndarray]], int]:
    """Partition `part`'s requests per (crawl, segment): the doc_ids asked and the pair partition asking each,
    read a row group at a time (the keys and segment names are not held together), and the bytes read."""
    gathered: dict[tuple[str, str], list[tuple[pa.Array, np.ndarray]]] = {}
    nbytes = 0
    for table in iter_part(fs(p), paths, part, REQUESTS):
        nbytes += table.nbytes
        crawls, doc_ids = split_keys(table["key"])
        groups = pa.table({"crawl": crawls, "segment": table["segment"]})
        for group in unique(groups, ["crawl", "segment"]).to_pylist():
            mask = pc.and_(pc.equal(crawls, group["crawl"]), pc.equal(table["segment"], group["segment"]))
            parts = table["part"].filter(mask).to_numpy()
            gathered.setdefault((group["crawl"], group["segment"]), []).append((doc_ids.filter(mask), parts))
    return {
        g: (pa.concat_arrays([d.combine_chunks() for d, _ in pieces]), np.concatenate([q for _, q in pieces]))
        for g, pieces in gathered.items()
    }, nbytes


@dataclass(frozen=True)
class Requested:
    """The distinct doc_ids asked of one segment (`ids`) and, for the k-th of `ids.values`, the partitions that
    asked for it: parts[starts[k] : starts[k + 1]]."""

    ids: Matcher
    starts: np.ndarray
    parts: np.ndarray

    @classmethod
    def of(cls, doc_ids: pa.Array, parts: np.ndarray) -> Requested:
        ids = Matcher(pc.unique(doc_ids))
        _, positions = ids.find(doc_ids)  # every asked doc_id is in the set: one position per request, in order
        order = np.argsort(positions, kind="stable")
        starts = np.searchsorted(positions[order], np.arange(len(ids) + 1))
        return cls(ids, starts, parts[order])

    def parts_of(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For found documents at `positions` of `ids.values`: each one's index, once per partition that asked,
        beside that partition."""
        which, at = ranges(self.starts[positions], self.starts[positions + 1] - self.starts[positions])
        return which, self.parts[at]


def feature_source(params: NearDuplicateParams):
    """The table and column a pair's similarity is computed from."""
    return (CURATED_DOCUMENTS, "text") if params.verify == "exact" else (DEDUP_MINHASH_SIGNATURES, "signature")


def feature_schema(params: NearDuplicateParams) -> pa.Schema:
    """Rows of the fetch stage: a document's key, its text or signature, the pair partition that asked."""
    source, column = feature_source(params)
    return pa.schema(
        [("key", pa.string()), ("value", small(source.arrow_schema.field(column)).type), ("part", pa.int64())]
    )


def verify_task(t: Task) -> TaskResult:
    """The pairs of partition `t.index` whose similarity reaches the threshold, compared in batches."""
    p, start = t.plan, task_start()
    pairs, nbytes = read_scratch(p, t.inputs[0][t.index : t.index + 1], 0, PAIRS)
    features, read = read_scratch(p, t.inputs[1], t.index, feature_schema(p.params))
    similar = similarity_of(p.params, features["key"].combine_chunks(), features["value"])
    del features  # the similarity holds what it needs
    keep = np.zeros(pairs.num_rows, bool)
    for lo in range(0, pairs.num_rows, VERIFY_BATCH):
        batch = pairs.slice(lo, VERIFY_BATCH)
        keep[lo : lo + batch.num_rows] = similar(batch["a"], batch["b"]) >= p.params.threshold
    edges = pairs.filter(pa.array(keep))
    return task_result(t, start, nbytes + read, verified_pairs=edges.num_rows, **write_graph(p, t.index, edges))


def similarity_of(params: NearDuplicateParams, keys: pa.Array, values: pa.ChunkedArray) -> Callable:
    """Pairwise similarity of documents by key (`keys[i]`'s text or signature is `values[i]`): exact Jaccard of
    shingle sets (each document's set made once) or the fraction of equal signature rows (vectorised; an empty
    signature is similar to nothing). The values stay Arrow arrays or one numpy matrix: a Python object per
    document held the verify task's features twice."""
    if params.verify == "exact":
        texts = large(values).combine_chunks()  # a partition's texts together may pass 2 GiB
        sets: dict[int, frozenset] = {}

        def shingle_set(i: int) -> frozenset:
            if i not in sets:
                if len(sets) >= MAX_SHINGLE_SETS:  # pairs come sorted by their first document: few are needed again
                    sets.clear()
                sets[i] = frozenset(shingles(texts[i].as_py() or "", params.n_grams))
            return sets[i]

        def exact(a: pa.ChunkedArray, b: pa.ChunkedArray) -> np.ndarray:
            ia, ib = positions(keys, a).tolist(), positions(keys, b).tolist()
            return np.array([exact_jaccard(shingle_set(x), shingle_set(y)) for x, y in zip(ia, ib)], np.float64)

        return exact
    sigs = signature_matrix(values)
    empty = np.all(sigs == np.uint32(0xFFFFFFFF), axis=1) if len(sigs) else np.empty(0, bool)

    def estimated(a: pa.ChunkedArray, b: pa.ChunkedArray) -> np.ndarray:
        ia, ib = positions(keys, a), positions(keys, b)
        sim = np.count_nonzero(sigs[ia] == sigs[ib], axis=1) / sigs.shape[1] if len(ia) else np.empty(0)
        return np.where(empty[ia] | empty[ib], 0.0, sim)

    return estimated


def positions(keys: pa.Array, wanted: pa.ChunkedArray) -> np.ndarray:
    """Where each of `wanted` is in `keys` (every one is: the fetch stage sent each pair's documents)."""
    found = pc.index_in(wanted, value_set=keys)
    if found.null_count:
        raise KeyError(f"{found.null_count} pair documents have no fetched features")
    return found.to_numpy(zero_copy_only=False).astype(np.int64)


def large(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Texts with 64-bit offsets."""
    return values.cast(pa.large_string()) if values.type == pa.string() else values


def signature_matrix(values: pa.ChunkedArray) -> np.ndarray:
    """Signatures (equal-length little-endian uint32 rows of a binary column) as one (documents, rows) matrix,
    made by one copy out of the Arrow buffers."""
    rows = [chunk_rows(chunk) for chunk in values.chunks if len(chunk)]
    widths = {r.shape[1] for r in rows}
    if len(widths) > 1:
        raise ValueError(f"signatures of unequal widths: {sorted(widths)[:5]} rows")
    return np.concatenate(rows) if rows else np.empty((0, 0), "<u4")


def chunk_rows(chunk: pa.Array) -> np.ndarray:
    """One chunk of a binary column of equal-width signatures, viewed as a (rows, values) uint32 matrix."""
    offset_type = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
    offsets = np.frombuffer(chunk.buffers()[1], offset_type)[chunk.offset : chunk.offset + len(chunk) + 1]
    widths = np.diff(offsets)
    if not (widths == widths[0]).all() or widths[0] % 4:
        raise ValueError(f"signatures of unequal or odd byte widths: {sorted(set(widths.tolist()))[:5]}")
    if chunk.buffers()[2] is None:  # every signature empty
        return np.empty((len(chunk), 0), "<u4")
    data = np.frombuffer(chunk.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    return data.view("<u4").reshape(len(chunk), int(widths[0]) // 4)
