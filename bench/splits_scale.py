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
        self.pool, self.peak_bytes = FreshProcessExecutor(workers), 0

    @property
    def stages(self) -> list:
        return self.pool.stages

    def map(self, fn, tasks, progress=None) -> list:
        out = self.pool.map(with_hwm, [(fn, t) for t in tasks], progress)
        self.peak_bytes = max([self.peak_bytes, *(hwm for _, hwm in out)])
        return [r for r, _ in out]


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
    args = parser.parse_args()
    sentences, notes = real_sentences()
    print("; ".join(notes))
    report: dict = {"sizes": []}
    if not args.no_paraphrases:
        report["paraphrases"] = paraphrase_recall()
        print("paraphrase set:", report["paraphrases"])
    for n in (int(float(x)) for x in args.docs.split(",") if x):
        result = measure(n, args, sentences)
        report["sizes"].append(result)
        print(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
