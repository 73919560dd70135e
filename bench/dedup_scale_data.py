"""The inputs of bench/dedup_scale.py, with their planted truth: near-duplicate clusters over documents
0..n-1, written straight into an embedded lakehouse.

Layout shared by both corpora: documents are numbered in canonical order, (crawl, doc_id) ascending. Crawl k
of `crawls` owns a contiguous range of numbers, cut into `segments` partitions (crawl, segment). A doc_id is
32 hex digits: 16 that increase within a crawl with random gaps (so ids spread over the whole hex space as
real ones do), then the document's number, so a scorer maps any row back to the truth without a lookup.
An incremental case plants its clusters over n + `added` documents and writes the last `added` as one more
crawl after the others, later: since cluster members are drawn from every document, that crawl's duplicates
copy documents of the earlier crawls (whose signatures it derives from theirs) as well as its own.

Planted clusters (`plant`): ~`dup_fraction` of the documents are duplicates in clusters of 2-50 members;
the member with the smallest number is the root (the canonical document), every other member copies its
parent, which is the root (a star) or, for `chain_fraction` of them, the previous member (a chain, whose
links cross crawls since members are drawn at random). A parent always precedes its child, so every crawl
prefix of a cluster is connected and the crawl-ordered rule gives the same clusters as connected
components. Plus `big_clusters` template clusters of `big_size` members (stars) and `big_buckets`
boilerplate buckets of `big_size` documents that share one band but nothing else (not duplicates: the
verification must reject them).

- synthetic: MinHash signatures generated directly (a child copies its parent's values except 0-12 of the
  112 rows: estimated Jaccard >= 0.89 with its parent, at least two bands shared), hashed into bands by the
  pipeline's own `signatures.band_tables` (so band hashes are `minhash.band_hashes` by construction) and
  written as `dedup.minhash_signatures` + `dedup.minhash_bands` the way `signatures.run_task` writes them.
- real: texts made of real sentences (the Wikipedia excerpt in data/corpus, and the Python 3.11 docs when
  ../shared/data is there); a document is `sentences` sentences drawn at random, a duplicate is its parent's
  text with a few words dropped or swapped and sometimes a boilerplate line; written as kept
  `curated.documents` rows, for the pipeline to hash.
"""

from __future__ import annotations

import bisect
import hashlib
import lzma
import re
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from assets.curated.models import REFERENCE_CORPUS as WIKI
from assets.dedup.minhash import DEFAULT_PARAMS, SIGNATURE_DTYPE
from assets.dedup.signatures import band_tables, signature_table
from bench.common import PYDOCS_TAR, BenchFailure
from iceberg_catalog import Lakehouse, Provenance, config_hash
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES

U64 = np.uint64
MAX_MUTATED_ROWS = 12  # of 112: estimated Jaccard with the parent >= 100/112, and >= 2 of 14 bands untouched
BOILERPLATE = (
    "Share this page on social media.",
    "All rights reserved. Terms of use and privacy policy apply.",
    "Subscribe to our newsletter for the latest updates.",
    "This site uses cookies to improve your experience.",
)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 of each value (uint64, wrapping): a counter-based random number, the same in any chunk."""
    z = np.asarray(x, dtype=U64) + U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
    return z ^ (z >> U64(31))


@dataclass(frozen=True)
class Layout:
    """Documents 0..n-1 over crawls and segments (contiguous number ranges, canonical order); `added` more
    documents, n..n+added-1, make one more crawl after those (the crawl an incremental run adds)."""

    n_docs: int
    crawls: int
    segments: int
    seed: int
    added: int = 0

    def crawl_name(self, k: int) -> str:
        return f"CC-BENCH-{k:02d}"

    def bounds(self) -> list[int]:
        """The first document of every crawl, then the end."""
        cuts = [k * self.n_docs // self.crawls for k in range(self.crawls + 1)]
        return cuts + [self.n_docs + self.added] if self.added else cuts

    def partitions(self, crawls: Iterable[int] | None = None) -> Iterator[tuple[str, str, int, int]]:
        """(crawl, segment, first, end) of every partition of `crawls` (crawl numbers; all), in canonical order."""
        bounds = self.bounds()
        for k in range(len(bounds) - 1) if crawls is None else crawls:
            c0, c1 = bounds[k], bounds[k + 1]
            for s in range(self.segments):
                s0, s1 = c0 + s * (c1 - c0) // self.segments, c0 + (s + 1) * (c1 - c0) // self.segments
                yield self.crawl_name(k), f"seg-{s:03d}", s0, s1

    def doc_ids(self, first: int, end: int) -> list[str]:
        """The doc_ids of documents first..end-1 (all in one crawl)."""
        bounds = self.bounds()
        k = bisect.bisect_right(bounds, first) - 1
        c0, c1 = bounds[k], bounds[k + 1]
        step = (1 << 64) // max(c1 - c0, 1)
        idx = np.arange(first, end, dtype=np.int64)
        jitter = mix64(idx.astype(U64) ^ U64(self.seed * 0x5851F42D + 17)) % U64(step)
        hi = (idx - c0).astype(U64) * U64(step) + jitter
        return [f"{h:016x}{i:016x}" for h, i in zip(hi.tolist(), idx.tolist())]


def numbers_of(doc_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Document numbers from doc_ids (their last 16 hex digits)."""
    raw = np.frombuffer("".join(doc_ids.to_pylist()).encode("ascii"), dtype=np.uint8).reshape(-1, 32)[:, 16:]
    digits = np.where(raw >= ord("a"), raw - ord("a") + 10, raw - ord("0")).astype(np.int64)
    return (digits * (16 ** np.arange(15, -1, -1, dtype=np.int64))).sum(axis=1)


@dataclass(frozen=True)
class Planted:
    """parent[i] == i for a root or a singleton; `bucket[i]` >= 0 for a boilerplate-bucket member."""

    parent: np.ndarray
    bucket: np.ndarray

    def roots(self) -> np.ndarray:
        """The truth: each document's cluster root (itself when not a duplicate)."""
        root = self.parent.copy()
        while True:
            up = self.parent[root]
            if np.array_equal(up, root):
                return root
            root = up


def plant(
    n: int,
    seed: int,
    dup_fraction: float = 0.10,
    chain_fraction: float = 0.3,
    big_clusters: int = 2,
    big_buckets: int = 2,
    big_size: int = 10_000,
) -> Planted:
    """Planted clusters over documents 0..n-1 (see the module docstring); deterministic in its arguments."""
    rng = np.random.default_rng([seed, 1])
    big_size = max(2, min(big_size, n // 50))
    target = int(n * dup_fraction) - big_clusters * (big_size - 1)
    sizes = np.minimum(2 + rng.geometric(0.25, max(1, target)) - 1, 50)  # 2-50 members, mean ~5
    sizes = sizes[: int(np.searchsorted(np.cumsum(sizes - 1), max(target, 1))) + 1]
    sizes = np.r_[sizes, np.full(big_clusters, big_size)].astype(np.int64)
    n_members = int(sizes.sum())
    if n_members + big_buckets * big_size > n:
        raise BenchFailure(f"{n} documents are too few for the planted clusters ({n_members} members)")
    chosen = rng.permutation(n)[: n_members + big_buckets * big_size]
    members, in_buckets = chosen[:n_members], chosen[n_members:]
    group = np.repeat(np.arange(len(sizes)), sizes)
    order = np.lexsort((members, group))
    members, group = members[order], group[order]
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    root = members[starts][group]
    first = np.zeros(n_members, bool)
    first[starts] = True
    prev = np.r_[members[:1], members[:-1]]
    chain = (rng.random(n_members) < chain_fraction) & (group < len(sizes) - big_clusters)
    parent = np.arange(n, dtype=np.int64)
    parent[members[~first]] = np.where(chain, prev, root)[~first]
    bucket = np.full(n, -1, np.int32)
    bucket[in_buckets] = np.repeat(np.arange(big_buckets, dtype=np.int32), big_size)
    return Planted(parent, bucket)


# ---- synthetic: signatures and bands --------------------------------------------------------------------------


def _mutated_rows(planted: Planted, nodes: np.ndarray, seed: int, width: int) -> np.ndarray:
    """(len(nodes), width) bool: the rows a node does not copy from its parent (all of them for a root)."""
    k = np.arange(width, dtype=U64)
    salt = U64(seed * 0x2545F4914F6CDD1D + 3)
    count = (mix64(nodes.astype(U64) ^ salt) % U64(MAX_MUTATED_ROWS + 1)).astype(np.int64)
    order = mix64(nodes.astype(U64)[:, None] * U64(width) + k + salt)
    rank = np.argsort(np.argsort(order, axis=1), axis=1)
    out = rank < count[:, None]
    out[planted.parent[nodes] == nodes] = True
    return out


def synthetic_signatures(planted: Planted, first: int, end: int, seed: int, width: int) -> np.ndarray:
    """Signatures of documents first..end-1: row k of a document is the value of the nearest node, going up
    its parent chain from itself, that mutated row k; a boilerplate bucket's members share band 0."""
    idx = np.arange(first, end, dtype=np.int64)
    owner = np.full((len(idx), width), -1, np.int64)
    rows, cur = np.arange(len(idx)), idx.copy()
    while len(rows):
        sub = owner[rows]
        take = _mutated_rows(planted, cur, seed, width) & (sub < 0)
        sub[take] = np.broadcast_to(cur[:, None], sub.shape)[take]
        owner[rows] = sub
        open_ = (sub < 0).any(axis=1)
        rows, cur = rows[open_], planted.parent[cur[open_]]
    salt = U64(seed * 0x9E3779B97F4A7C15 + 11)
    values = mix64(owner.astype(U64) * U64(width) + np.arange(width, dtype=U64) + salt) >> U64(32)
    sig = values.astype(SIGNATURE_DTYPE)
    b = planted.bucket[idx]
    shared = b >= 0
    if shared.any():
        rows_per_band = DEFAULT_PARAMS.rows
        template = mix64(b[shared].astype(U64)[:, None] * U64(width) + np.arange(rows_per_band, dtype=U64) + ~salt)
        sig[shared, :rows_per_band] = (template >> U64(32)).astype(SIGNATURE_DTYPE)
    sig[sig == np.iinfo(SIGNATURE_DTYPE).max] -= 1  # never the empty signature's value
    return sig


def bench_provenance(asset: str, partition: str, seed: int) -> Provenance:
    return Provenance(
        asset, partition, "bench-dedup-scale", "bench", config_hash({"bench": "dedup_scale", "seed": seed})
    )


def write_synthetic(
    lakehouse: Lakehouse, layout: Layout, planted: Planted, batch_docs: int, crawls: Iterable[int] | None = None
) -> int:
    """dedup.minhash_signatures + dedup.minhash_bands of every partition of `crawls` (all), per batch of
    `batch_docs` documents as `signatures.run_task` writes them; the band rows written."""
    params = DEFAULT_PARAMS
    rows = 0
    for crawl, segment, s0, s1 in layout.partitions(crawls):
        partition = {"crawl": crawl, "segment": segment}
        bands = lakehouse.writer(DEDUP_MINHASH_BANDS, partition)
        sigs = lakehouse.writer(DEDUP_MINHASH_SIGNATURES, partition)
        for b0 in range(s0, s1, batch_docs):
            b1 = min(b0 + batch_docs, s1)
            ids = layout.doc_ids(b0, b1)
            sig = synthetic_signatures(planted, b0, b1, layout.seed, params.num_perm)
            for table in band_tables(ids, sig, crawl, segment, params):
                bands.write(table)
            sigs.write(signature_table(ids, sig, crawl, segment))
        key = f"{crawl}/{segment}"
        rows += bands.commit(bench_provenance("dedup/minhash_bands", key, layout.seed)).rows
        sigs.commit(bench_provenance("dedup/minhash_signatures", key, layout.seed))
    return rows


# ---- real text: curated documents ----------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def real_sentences() -> tuple[list[str], list[str]]:
    """Distinct sentences of 6-60 words from the real texts: (sentences, one description line per source)."""
    if not WIKI.is_file():
        raise BenchFailure(f"{WIKI} is missing: it ships with the repository")
    texts = [lzma.open(WIKI, "rt", encoding="utf-8").read()]
    notes = [f"Wikipedia excerpt {WIKI.name} (in the repo)"]
    if PYDOCS_TAR.is_file():
        with tarfile.open(PYDOCS_TAR) as tf:
            for member in tf:
                if member.isfile() and member.name.endswith((".rst", ".txt")):
                    texts.append(tf.extractfile(member).read().decode("utf-8", "replace"))
        notes.append(f"Python 3.11 reST docs {PYDOCS_TAR.name} (../shared/data)")
    else:
        notes.append(f"../shared/data is MISSING ({PYDOCS_TAR} not found): Wikipedia sentences only")
    seen: dict[str, None] = {}
    for text in texts:
        for para in re.split(r"\n\s*\n", text):
            for s in _SENTENCE_END.split(" ".join(para.split())):
                if 6 <= len(s.split()) <= 60 and not s.startswith("<"):
                    seen.setdefault(s)
    sentences = list(seen)
    notes.append(f"{len(sentences):,} distinct sentences of 6-60 words")
    return sentences, notes


def perturb(text: str, rng: np.random.Generator) -> str:
    """A near copy: ~1% of words dropped, one adjacent pair swapped, sometimes a boilerplate line."""
    words = text.split(" ")
    keep = rng.random(len(words)) >= 0.01
    words = [w for w, k in zip(words, keep) if k] or words
    if len(words) > 2:
        j = int(rng.integers(0, len(words) - 1))
        words[j], words[j + 1] = words[j + 1], words[j]
    out = " ".join(words)
    if rng.random() < 0.3:
        out += "\n" + BOILERPLATE[int(rng.integers(0, len(BOILERPLATE)))]
    return out


def real_texts(planted: Planted, sentences: list[str], seed: int, per_doc: int) -> list[str]:
    """Text of every document: `per_doc` random sentences, or a perturbed copy of its parent's text."""
    rng = np.random.default_rng([seed, 2])
    picks = rng.integers(0, len(sentences), (len(planted.parent), per_doc))
    texts: list[str] = []
    for i, p in enumerate(planted.parent.tolist()):
        if p == i:
            texts.append(" ".join(sentences[j] for j in picks[i]))
        else:
            texts.append(perturb(texts[p], np.random.default_rng([seed, 3, i])))
    return texts


def curated_rows(columns: dict[str, list]) -> pa.Table:
    """curated.documents rows with `columns`; every other column null (no curation ran)."""
    n = len(columns["doc_id"])
    schema = CURATED_DOCUMENTS.arrow_schema
    return pa.table([columns.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)


def write_real(lakehouse: Lakehouse, layout: Layout, texts: list[str], batch_docs: int) -> int:
    """Kept curated.documents rows of every partition; rows written."""
    rows = 0
    for crawl, segment, s0, s1 in layout.partitions():
        writer = lakehouse.writer(CURATED_DOCUMENTS, {"crawl": crawl, "segment": segment})
        for b0 in range(s0, s1, batch_docs):
            b1 = min(b0 + batch_docs, s1)
            ids = layout.doc_ids(b0, b1)
            batch = texts[b0:b1]
            writer.write(
                curated_rows(
                    {
                        "doc_id": ids,
                        "record_id": ids,
                        "deletion_key": ids,
                        "crawl": [crawl] * len(ids),
                        "segment": [segment] * len(ids),
                        "url": [f"https://bench.example/{d}" for d in ids],
                        "kept": [True] * len(ids),
                        "text": batch,
                        "text_sha256": [hashlib.sha256(t.encode()).hexdigest() for t in batch],
                        "n_chars": [len(t) for t in batch],
                    }
                )
            )
        rows += writer.commit(bench_provenance("curated/documents", f"{crawl}/{segment}", layout.seed)).rows
    return rows


def score(roots: np.ndarray, rows: pa.Table, docs: range | None = None) -> dict:
    """Precision/recall of the near duplicates found (rows of dedup.near_duplicates: doc_id, decision,
    duplicate_of) against the planted truth, per document of `docs` (document numbers; all): a found duplicate
    is right when it is a planted duplicate; `right_canonical` counts those whose duplicate_of is also its
    planted root."""
    docs = range(len(roots)) if docs is None else docs
    truth = roots != np.arange(len(roots))
    dup_rows = rows.filter(pa.compute.equal(rows["decision"], "near_duplicate"))
    found = numbers_of(dup_rows["doc_id"]) if dup_rows.num_rows else np.empty(0, np.int64)
    canon = numbers_of(dup_rows["duplicate_of"]) if dup_rows.num_rows else np.empty(0, np.int64)
    inside = (found >= docs.start) & (found < docs.stop)
    found, canon = found[inside], canon[inside]
    hit = truth[found]
    planted = int(truth[docs.start : docs.stop].sum())
    return {
        "planted_duplicates": planted,
        "found_duplicates": int(len(found)),
        "precision": float(hit.mean()) if len(found) else 1.0,
        "recall": float(hit.sum() / planted) if planted else 1.0,
        "right_canonical": int((hit & (canon == roots[found])).sum()),
    }


def added_links(planted: Planted, first: int) -> dict:
    """How the planted duplicates among documents `first`.. (the added crawl) link: to a parent in an earlier
    crawl, or to one in the same crawl; and how many boilerplate-bucket members it has."""
    new = np.arange(first, len(planted.parent))
    parent = planted.parent[new]
    dup = parent != new
    return {
        "duplicates": int(dup.sum()),
        "parent_earlier": int((dup & (parent < first)).sum()),
        "parent_same_crawl": int((dup & (parent >= first)).sum()),
        "bucket_members": int((planted.bucket[new] >= 0).sum()),
    }
