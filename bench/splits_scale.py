"""Split clusters at scale (issue 42): embeddings, semantic links and split assignments on real text.

Per --docs size N: N English documents made of real sentences (bench/dedup_scale_data.py `real_sentences`:
the Wikipedia excerpt of data/corpus, plus the Python docs when ../shared/data has them), `--sentences` per
document, in 2 crawls of 2 segments each (canonical order). 5% are perturbed copies of an earlier document
(`perturb`: near duplicates, written to dedup.near_duplicates as must-links, as near dedup would find them);
5% are paraphrase-like edits of an earlier document (a third of its sentences replaced by others, the order
shuffled: the semantic neighbours a split must keep together); the rest draw their sentences at random. Then,
as the pipeline runs them: the embeddings of every segment (assets/dedup/embeddings_table.py, tasks on
bench.task_pool.FreshProcessExecutor, 2 at a time, each in a fresh process), and split assignments
(assets/dedup/split_assignments.build: centroids fitted on the first crawl, links of crawl 0, assignments,
then crawl 1 added incrementally with its own links and assignments; link tasks on the same executor).

Printed per size: embed documents/s per core (CPU of the tasks), link seconds per crawl (wall of the link
tasks) and the assignment step's, links per document, the largest split cluster's share of the documents,
realised validation/test fractions of documents against the configured ones, edit recall (edited documents in
their source's split cluster), and the largest task peak RSS (its own VmHWM; and the step process's, where the
assignments run).
Plus, once: paraphrase recall on the committed paraphrase set (data/benchmarks/paraphrases/: 50 items) with the
originals among the 1,572 web pages and Wikipedia runs of the semantic quarantine in crawl A and the paraphrases
in crawl B, under the stored rule.

    python bench/splits_scale.py [--docs 1e4,1e5] [--json] [--sentences 8] [--centroids 0 (= N/100, at most 1024)]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assets.dedup import embeddings_table, semantic_links, split_assignments  # noqa: E402
from assets.embeddings import embed, model_sha256  # noqa: E402
from bench.dedup_scale_data import Layout, bench_provenance, curated_rows, perturb, real_sentences  # noqa: E402
from bench.task_pool import FreshProcessExecutor  # noqa: E402
from iceberg_catalog import Lakehouse, schemas  # noqa: E402

COPY, EDIT = 0.05, 0.05  # shares of perturbed copies and paraphrase-like edits


def vm_hwm_bytes() -> int:
    """This process's own peak RSS (VmHWM: per address space, so not the parent's high-water mark that
    ru_maxrss carries across the spawn's exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def with_hwm(job: tuple) -> tuple:
    """Run one task in a task process; (its result, the process's own peak RSS)."""
    fn, task = job
    return fn(task), vm_hwm_bytes()


class HwmExecutor:
    """`FreshProcessExecutor` (a fresh process per task, 2 at a time) recording each task's own VmHWM."""

    def __init__(self, workers: int = 2) -> None:
        self.pool, self.peak_bytes, self.names = FreshProcessExecutor(workers), 0, []

    @property
    def stages(self) -> list:
        return self.pool.stages

    def map(self, fn, tasks, progress=None) -> list:
        out = self.pool.map(with_hwm, [(fn, t) for t in tasks], progress)
        self.peak_bytes = max([self.peak_bytes, *(hwm for _, hwm in out)])
        self.names.append((fn.__name__, max((hwm for _, hwm in out), default=0)))
        return [r for r, _ in out]

    def stage_table(self, first: int) -> list[dict]:
        """The stages from `first` on: task function, tasks, wall and CPU seconds, largest task VmHWM."""
        return [
            {"fn": name, "tasks": s["tasks"], "wall_s": round(s["wall_s"], 1), "cpu_s": round(s["cpu_s"], 1)}
            | {"peak_mib": round(hwm / 2**20, 1)}
            for (name, hwm), s in zip(self.names[first:], (x.summary() for x in self.pool.stages[first:]))
        ]


def corpus(n: int, sentences: list[str], per_doc: int, seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(texts, parent of each copy or -1, source of each edit or -1); a parent or source precedes its child."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(sentences), (n, per_doc))
    kind, parent, source, texts = rng.random(n), np.full(n, -1), np.full(n, -1), []
    for i in range(n):
        j = int(rng.integers(0, i)) if i else -1
        if i and kind[i] < COPY:
            parent[i] = parent[j] if parent[j] >= 0 else j  # a copy of a copy belongs to the same root
            texts.append(perturb(texts[j], np.random.default_rng([seed, i])))
            continue
        if i and kind[i] < COPY + EDIT and parent[j] < 0:
            source[i] = j
            keep = picks[j].copy()
            swap = rng.random(per_doc) < 1 / 3
            keep[swap] = picks[i][swap]
            picks[i] = rng.permutation(keep)
        texts.append(" ".join(sentences[k] for k in picks[i]))
    return texts, parent, source


def write_crawl(lakehouse: Lakehouse, layout: Layout, k: int, texts: list[str], parent: np.ndarray) -> None:
    """Crawl k's documents (kept, English) and its near-duplicate rows (roots of copies in the crawl)."""
    for crawl, segment, s0, s1 in layout.partitions([k]):
        d = layout.doc_ids(s0, s1)
        columns = {"doc_id": d, "record_id": d, "deletion_key": d, "crawl": [crawl] * len(d), "url": d}
        columns |= {"segment": [segment] * len(d), "kept": [True] * len(d), "language": ["en"] * len(d)}
        writer = lakehouse.writer(schemas.CURATED_DOCUMENTS, {"crawl": crawl, "segment": segment})
        writer.write(curated_rows({**columns, "text": texts[s0:s1]}))
        writer.commit(bench_provenance("curated/documents", f"{crawl}/{segment}", layout.seed))
    first, end = layout.bounds()[k], layout.bounds()[k + 1]
    members = [i for i in range(first, end) if parent[i] >= 0 or (parent == i).any()]
    roots = {i: int(parent[i]) if parent[i] >= 0 else i for i in members}
    doc_of = lambda i: layout.doc_ids(i, i + 1)[0]  # noqa: E731
    rows = [
        {
            "doc_id": doc_of(i),
            "crawl": layout.crawl_name(k),
            "segment": "seg-000",
            "decision": None if roots[i] == i else "near_duplicate",
            "cluster_id": doc_of(roots[i]),
            "cluster_size": 2,
            "duplicate_of": None if roots[i] == i else doc_of(roots[i]),
            "cluster_crawl": layout.crawl_name(int(np.searchsorted(layout.bounds(), roots[i], "right") - 1)),
        }
        for i in members
    ]
    writer = lakehouse.writer(schemas.DEDUP_NEAR_DUPLICATES, {"crawl": layout.crawl_name(k)})
    writer.write(pa.Table.from_pylist(rows, schema=schemas.DEDUP_NEAR_DUPLICATES.arrow_schema))
    writer.commit(bench_provenance("dedup/near_duplicates", layout.crawl_name(k), layout.seed))


def embed_crawl(lakehouse: Lakehouse, layout: Layout, k: int, pool: HwmExecutor) -> dict:
    """Every segment of crawl k embedded on `pool`; CPU seconds of the tasks and their largest peak RSS."""
    cpu = docs = 0
    pool.peak_bytes = 0
    for crawl, segment, _, _ in layout.partitions([k]):
        snap = lakehouse.snapshot_id(schemas.CURATED_DOCUMENTS)
        tasks = embeddings_table.plan(lakehouse, crawl, segment, snap, embeddings_table.EmbeddingParams(), "bench")
        results = pool.map(embeddings_table.run_task, tasks)
        embeddings_table.commit(lakehouse, crawl, segment, results, bench_provenance("dedup/embeddings", crawl, 0))
        stage = pool.stages[-1].summary()
        cpu += stage["cpu_s"]
        docs += embeddings_table.totals(results)["documents"]
    return {"documents": docs, "cpu_s": cpu, "peak_rss_bytes": pool.peak_bytes}


def assign(lakehouse: Lakehouse, params: split_assignments.SplitClusterParams, pool: HwmExecutor) -> dict:
    """The split_clusters step: pending crawls' links (on `pool`) and assignments; seconds and the link tasks."""
    prov = {
        t: bench_provenance(t.identifier, None, 0)
        for t in (schemas.DEDUP_SEMANTIC_CENTROIDS, schemas.DEDUP_SEMANTIC_LINKS)
    }
    prov[schemas.DEDUP_SPLIT_ASSIGNMENTS] = bench_provenance("dedup/split_assignments", None, 0)
    before, pool.peak_bytes = len(pool.stages), 0
    t0 = time.perf_counter()
    built = split_assignments.build(lakehouse, params, pool, uuid.uuid4().hex, prov)
    seconds = time.perf_counter() - t0
    stages = [s.summary() for s in pool.stages[before:]]
    link_s = sum(s["wall_s"] for s in stages)
    return {
        "seconds": round(seconds, 2),
        "link_seconds": round(link_s, 2),
        "assign_seconds": round(seconds - link_s, 2),
        "link_task_peak_rss_mib": round(pool.peak_bytes / 2**20, 1),
        "stages": pool.stage_table(before),
        "crawls": built["stats"]["crawls"],
    }


def all_pairs(layout: Layout, k: int) -> int:
    """Pairs the all-pairs search compares when crawl k is added: its documents x earlier ones, and its own."""
    bounds = layout.bounds()
    new, earlier = bounds[k + 1] - bounds[k], bounds[k]
    return new * earlier + new * (new - 1) // 2


def lakehouse_at(home: str) -> Lakehouse:
    """An embedded lakehouse under `home` (the task processes inherit TOKENLAKE_HOME)."""
    os.environ["TOKENLAKE_HOME"] = home
    return Lakehouse()


def measure(n: int, args, sentences: list[str]) -> dict:
    """One size: corpus, embeddings, crawl 0 assigned, crawl 1 added; the figures of the module docstring."""
    layout = Layout(n, 2, 2, args.seed)
    texts, parent, source = corpus(n, sentences, args.sentences, args.seed)
    centroids = args.centroids or int(min(1024, max(8, n // 100)))
    params = split_assignments.SplitClusterParams(
        links=semantic_links.LinkParams(centroids=centroids, sample_docs=min(50_000, n // 2))
    )
    pool = HwmExecutor(2)
    with tempfile.TemporaryDirectory(prefix="splits-scale-") as home:
        lakehouse = lakehouse_at(home)
        steps, embedded = [], {"documents": 0, "cpu_s": 0.0, "peak_rss_bytes": 0}
        for k in (0, 1):
            write_crawl(lakehouse, layout, k, texts, parent)
            e = embed_crawl(lakehouse, layout, k, pool)
            embedded = {
                key: max(embedded[key], v) if key == "peak_rss_bytes" else embedded[key] + v for key, v in e.items()
            }
            steps.append(assign(lakehouse, params, pool))
        rows = lakehouse.scan(schemas.DEDUP_SPLIT_ASSIGNMENTS, ("doc_id", "split_cluster_id", "split")).to_pydict()
        links = lakehouse.scan(schemas.DEDUP_SEMANTIC_LINKS, ("doc_id",)).num_rows
    cluster_of = dict(zip(rows["doc_id"], rows["split_cluster_id"]))
    ids = [d for _, _, s0, s1 in layout.partitions() for d in layout.doc_ids(s0, s1)]
    sizes = Counter(rows["split_cluster_id"])
    split_share = Counter(rows["split"])
    edits = np.flatnonzero(source >= 0)
    joined = sum(cluster_of[ids[i]] == cluster_of[ids[int(source[i])]] for i in edits)
    sp = params.split_params()
    return {
        "docs": n,
        "centroids": centroids,
        "embed_docs_per_s_per_core": round(embedded["documents"] / max(embedded["cpu_s"], 1e-9), 1),
        "crawl_0": steps[0],
        "crawl_1_added": steps[1],
        # the comparisons the all-pairs search would make for each crawl (earlier x new + new pairs)
        "all_pairs_comparisons": [all_pairs(layout, k) for k in (0, 1)],
        "links_per_doc": round(links / n, 3),
        "largest_cluster_share": round(max(sizes.values()) / n, 6),
        "largest_cluster_docs": max(sizes.values()),
        "validation_fraction": [round(split_share["validation"] / n, 5), sp.validation],
        "test_fraction": [round(split_share["test"] / n, 5), sp.test],
        "edit_recall": round(joined / max(len(edits), 1), 3),
        "edits": len(edits),
        "largest_embed_task_peak_rss_mib": round(embedded["peak_rss_bytes"] / 2**20, 1),
        "step_process_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


# --- the incremental case, on synthetic vectors ---------------------------------------------------------------

SYN_SEGMENT = 250_000  # synthetic documents per segment (a data file each: one route task)


def synthetic_vectors(n: int, pool: np.ndarray, weights: np.ndarray, per_doc: int, seed) -> np.ndarray:
    """n document vectors from the embedding distribution (labelled synthetic): a document is the normalised
    word-weighted sum of `per_doc` real sentence embeddings (wordllama pools token vectors by their mean, so a
    document's vector is close to its sentences' weighted sum); 5% near copies of an earlier document of the
    batch (noise: cosine ~0.99), 5% edits (a third of its sentences replaced)."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(pool), (n, per_doc))
    kind, earlier = rng.random(n), (rng.random(n) * np.arange(n)).astype(np.int64)
    edit = (kind >= COPY) & (kind < COPY + EDIT) & (np.arange(n) > 0)
    swap = rng.random((n, per_doc)) < 1 / 3
    picks[edit] = np.where(swap[edit], picks[edit], picks[earlier[edit]])
    v = np.zeros((n, pool.shape[1]), np.float32)
    for k in range(per_doc):  # one sentence column at a time: (n, per_doc, dim) would be 400 MiB at 50k
        v += pool[picks[:, k]] * weights[picks[:, k], None]
    copy = (kind < COPY) & (np.arange(n) > 0)
    v[copy] = v[earlier[copy]] + rng.normal(0, 0.12, (int(copy.sum()), v.shape[1])) * np.abs(v[earlier[copy]]).mean()
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def synthetic_range(a: int, b: int, pool: np.ndarray, weights: np.ndarray, per_doc: int, seed: tuple) -> np.ndarray:
    """Synthetic documents a..b-1 of one sequence, 50,000 to a chunk seeded by its start (so a prefix of a longer
    sequence is the shorter one)."""
    chunks = range(a - a % 50_000, b, 50_000)
    v = np.concatenate([synthetic_vectors(50_000, pool, weights, per_doc, [*seed, c]) for c in chunks])
    return v[a - chunks[0] : b - chunks[0]]


def write_vectors(lakehouse: Lakehouse, crawl: str, n: int, make) -> None:
    """`n` synthetic embeddings of `crawl`, one segment per SYN_SEGMENT documents (`make(lo, hi)`: vectors)."""
    sha = model_sha256()
    for seg, lo in enumerate(range(0, n, SYN_SEGMENT)):
        hi = min(n, lo + SYN_SEGMENT)
        segment = f"seg-{seg:03d}"
        writer = lakehouse.writer(schemas.DEDUP_EMBEDDINGS, {"crawl": crawl, "segment": segment})
        for a in range(lo, hi, 50_000):
            b = min(hi, a + 50_000)
            ids = [f"{crawl}-{i:012d}" for i in range(a, b)]
            writer.write(embeddings_table.embedding_table(ids, make(a, b), crawl, segment, sha))
        writer.commit(bench_provenance("dedup/embeddings", crawl, 0))


def incremental(existing: int, added: int, centroids: int, sentences: list[str], args) -> dict:
    """Synthetic vectors: a crawl of `added` documents linked after one of `existing` documents (the same added
    crawl whatever `existing` is; the existing documents a prefix of one sequence): the added crawl's link step
    (route + link stages, 2 task processes, commit), its cosines and what uncut buckets would have cost."""
    pool_texts = sentences[:: max(1, len(sentences) // 20_000)]
    pool = embed(pool_texts)
    weights = np.array([len(t.split()) for t in pool_texts], np.float32)

    def vectors(salt: int):
        return functools.partial(
            synthetic_range, pool=pool, weights=weights, per_doc=args.sentences, seed=(args.seed, salt)
        )

    links = semantic_links.LinkParams(centroids=centroids, sample_docs=50_000)
    model, pool_ = model_sha256(), HwmExecutor(2)
    with tempfile.TemporaryDirectory(prefix="splits-incr-") as home:
        lakehouse = lakehouse_at(home)
        write_vectors(lakehouse, "CC-SYN-00", existing, vectors(0))
        write_vectors(lakehouse, "CC-SYN-01", added, vectors(1))
        at = lakehouse.snapshot_id(schemas.DEDUP_EMBEDDINGS)
        prov = bench_provenance("dedup/semantic_links", None, 0)
        version, c, _ = semantic_links.ensure_centroids(lakehouse, at, model, links, prov)
        run = uuid.uuid4().hex
        t0 = time.perf_counter()
        planned = semantic_links.plan(lakehouse, "CC-SYN-01", at, model, (version, c), links, run)
        results, _ = semantic_links.link_crawl(planned, pool_, run, prov)
        seconds = time.perf_counter() - t0
    return {
        "existing": existing,
        "added": added,
        "centroids": centroids,
        "link_seconds": round(seconds, 1),
        "stages": pool_.stage_table(0),
        "largest_task_peak_rss_mib": round(pool_.peak_bytes / 2**20, 1),
        **semantic_links.totals(results),
    }


def paraphrase_recall() -> dict:
    """The 50 committed paraphrases vs their originals, with 1,572 real background documents, under the rule."""
    from assets.quarantine.semantic import reference_runs, web_texts
    from tests.dedup.documents import doc_id, write_documents
    from tests.dedup.split_lake import assign_splits

    items = [json.loads(line) for line in (ROOT / "data/benchmarks/paraphrases/paraphrases.jsonl").open()]
    background = list(web_texts()) + list(reference_runs())
    with tempfile.TemporaryDirectory(prefix="splits-para-") as home:
        lakehouse = lakehouse_at(home)
        a = [(doc_id(t, "a"), t, True) for t in background[::2] + [i["original"] for i in items]]
        b = [(doc_id(t, "b"), t, True) for t in background[1::2] + [i["paraphrase"] for i in items]]
        write_documents(lakehouse, "CRAWL-A", "s", a, files=2, language="en")
        write_documents(lakehouse, "CRAWL-B", "s", b, files=2, language="en")
        params = split_assignments.SplitClusterParams(links=semantic_links.LinkParams(centroids=16, sample_docs=2000))
        assign_splits(lakehouse, params)
        rows = lakehouse.scan(schemas.DEDUP_SPLIT_ASSIGNMENTS, ("doc_id", "split_cluster_id")).to_pydict()
    cluster_of = dict(zip(rows["doc_id"], rows["split_cluster_id"]))
    joined = [cluster_of[x[0]] == cluster_of[y[0]] for x, y in zip(a[-len(items) :], b[-len(items) :])]
    sizes = Counter(rows["split_cluster_id"])
    return {"items": len(items), "recall": sum(joined) / len(items), "largest_cluster": max(sizes.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", default="1e4", help="sizes, comma-separated")
    parser.add_argument("--sentences", type=int, default=8, help="real sentences per document")
    parser.add_argument("--centroids", type=int, default=0, help="k-means centroids (0: N/100, 8..1024)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-paraphrases", action="store_true", help="skip the paraphrase-set recall")
    parser.add_argument("--json", action="store_true", help="also print the whole report as one JSON line")
    parser.add_argument(
        "--incremental",
        default="",
        help="synthetic vectors: ADDED:EXISTING1,EXISTING2,... (e.g. 2.5e5:2.5e5,1e6): the added crawl's links "
        "after each existing size, and the time ratio of the last to the first",
    )
    parser.add_argument("--incremental-centroids", type=int, default=0, help="0: 1024 x added / 1M (a scale model)")
    args = parser.parse_args()
    sentences, notes = real_sentences()
    print("; ".join(notes))
    report: dict = {"sizes": [], "incremental": []}
    if not args.no_paraphrases:
        report["paraphrases"] = paraphrase_recall()
        print("paraphrase set:", report["paraphrases"])
    for n in (int(float(x)) for x in args.docs.split(",") if x):
        result = measure(n, args, sentences)
        report["sizes"].append(result)
        print(json.dumps(result, indent=1))
    if args.incremental:
        added, sizes = args.incremental.split(":")
        n = int(float(added))
        centroids = args.incremental_centroids or max(8, round(1024 * n / 1e6))
        for existing in (int(float(x)) for x in sizes.split(",")):
            result = incremental(existing, n, centroids, sentences, args)
            report["incremental"].append(result)
            print("synthetic vectors:", json.dumps(result, indent=1), flush=True)
        runs = report["incremental"]
        report["incremental_ratio"] = round(runs[-1]["link_seconds"] / runs[0]["link_seconds"], 2)
        print("time ratio, last / first existing size:", report["incremental_ratio"])
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
