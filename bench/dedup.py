"""Near-duplicate detection at scale: MinHash signatures per second per core against datatrove and the naive
way, then clustering time and peak memory for a million documents' band hashes.

1. Signatures/s per core on the same real documents: the Wikipedia excerpt in data/corpus and, when
   ../shared/data is present, the Python 3.11 reST documentation, both cut into ~500-word chunks.
   - ours: `assets.dedup.minhash.signatures` (shingle hashes vectorised in numpy, datasketch `bulk`), in-process;
   - datatrove 0.10.1 `MinhashDedupSignature` (5-grams, 14 buckets x 8 hashes, seed 1, its default 64-bit
     xxhash), in its own venv (bench/out/venvs/datatrove, the one bench/curate.py builds) on the same texts
     written to JSONL. The child times its parts (imports, JsonlReader, the step, the bare signature loop);
     the ratio uses the step, with start-up and reader reported apart;
   - naive: Mini-C4's `MinHash(num_perm=112, seed=1)` and one `update()` per shingle (datasketch's default
     SHA-1-32 hash), on an evenly spaced subset, against ours on the same subset.
   Per core = documents / CPU seconds (user+sys) of the process doing the work.
2. Clustering of generated band hashes: --docs documents x 14 bands of random int64 hashes over --crawls
   crawls, with --dup-fraction of the documents planted in near-duplicate groups (2-6 members, each sharing a
   random non-empty subset of bands with the group's earliest member) plus --big-groups template groups of
   --big-size members (buckets past MAX_ALL_PAIRS_BUCKET, the star path). Each run is a fresh subprocess;
   peak RSS is its VmHWM from /proc/self/status.
   (a) pure: band by band `band_candidate_pairs`, then `merge_edges` and `cluster_crawl_ordered`;
   (b) asset: the bands written into a real embedded Iceberg `dedup.minhash_bands` (one partition per
       crawl, 32-hex doc_ids, in sorted batches of --batch-docs documents as `dedup_minhash` writes them;
       setup, not timed), then
       `dedup/near_duplicates` materialised without verification (`verify="none"`) through Dagster (the
       dedup state's own definitions) in a fresh process (timed).
   Both check that every planted group comes out as one cluster whose canonical document is its earliest
   member, and that no other document is clustered.

    python bench/dedup.py [--max-docs 0] [--naive-docs 500] [--docs 1000000] [--crawls 10] [--no-asset]

Exits 1 when a side fails or the planted clusters are not recovered; the speed and memory goals are printed
and never change the exit status.
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
import resource
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assets.curated.models import REFERENCE_CORPUS as WIKI  # noqa: E402
from bench.children import child_command, repo_env, run_json_child  # noqa: E402
from bench.common import PYDOCS_TAR, BenchFailure, clean_env, run_reported  # noqa: E402
from bench.curate import DT_VENV, ensure_datatrove_venv  # noqa: E402

DT_SCRIPT = ROOT / "bench" / "dedup_datatrove" / "minhash_signatures.py"
QUIET_LOGGERS = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
RSS_GOAL_BYTES = 2 << 30
GOAL_VS_DATATROVE, GOAL_VS_NAIVE = 1.5, 20.0


# ---- process accounting ------------------------------------------------------------------------------------


def cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def proc_status_bytes(field: str) -> int:
    """VmHWM (peak resident set) or VmRSS of this process, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise BenchFailure(f"/proc/self/status has no {field}: peak memory cannot be measured on this system")


def mib(n_bytes: float) -> str:
    return f"{n_bytes / (1 << 20):,.0f} MiB"


def ours_env(home: Path | None = None) -> dict:
    env = repo_env()
    if home is not None:  # never a user's catalog or Dagster instance
        env.update(TOKENLAKE_HOME=str(home), DAGSTER_HOME=str(home / "dagster"))
        for var in ("TOKENLAKE_CATALOG", "TOKENLAKE_LM_PATH", "TOKENLAKE_CRAWL_ROOT"):
            env.pop(var, None)
    return env


# ---- part 1: signatures per second ---------------------------------------------------------------------------


def chunk_paragraphs(paragraphs: list[str], words: int, min_words: int) -> list[str]:
    """Consecutive paragraphs joined into chunks of at least `words` words (a short tail is kept if >= min)."""
    out, cur, n = [], [], 0
    for p in paragraphs:
        cur.append(p)
        n += len(p.split())
        if n >= words:
            out.append("\n\n".join(cur))
            cur, n = [], 0
    if n >= min_words:
        out.append("\n\n".join(cur))
    return out


def load_corpus(words: int) -> tuple[list[str], list[str]]:
    """Real documents: (texts, one description line per source)."""
    if not WIKI.is_file():
        raise BenchFailure(f"{WIKI} is missing: it ships with the repository")
    texts: list[str] = []
    notes: list[str] = []
    article: list[str] = []
    n_wiki = 0
    for line in lzma.open(WIKI, "rt", encoding="utf-8"):
        line = line.strip()
        if line.startswith("<doc "):
            article = []
        elif line == "</doc>":
            chunks = chunk_paragraphs(article, words, words // 5)
            texts += chunks
            n_wiki += len(chunks)
        elif line:
            article.append(line)
    notes.append(f"{n_wiki} chunks of the Wikipedia excerpt ({WIKI.relative_to(ROOT)})")
    if PYDOCS_TAR.is_file():
        n_py = 0
        with tarfile.open(PYDOCS_TAR) as tf:
            for member in tf:
                if member.isfile() and member.name.endswith((".rst", ".txt")):
                    text = tf.extractfile(member).read().decode("utf-8", "replace")
                    chunks = chunk_paragraphs(re.split(r"\n\s*\n", text), words, words // 5)
                    texts += chunks
                    n_py += len(chunks)
        notes.append(f"{n_py} chunks of the Python 3.11 reST docs ({PYDOCS_TAR.name})")
    else:
        notes.append(
            f"../shared is missing ({PYDOCS_TAR} not found): continuing with the repo's Wikipedia excerpt only"
        )
    return texts, notes


def evenly_spaced(n_total: int, n: int) -> np.ndarray:
    return np.unique(np.linspace(0, n_total - 1, min(n, n_total)).round().astype(int))


def best_cpu(fn, repeats: int) -> float:
    """Least CPU seconds of `repeats` calls (the machine is shared; interference only ever adds)."""
    best = float("inf")
    for _ in range(repeats):
        c0 = cpu_self()
        fn()
        best = min(best, cpu_self() - c0)
    return best


def signature_speed(texts: list[str], args, work: Path) -> dict:
    from datasketch import MinHash

    from assets.dedup.minhash import DEFAULT_PARAMS, is_empty_signature, shingles, signatures

    params = DEFAULT_PARAMS
    res: dict = {"n_docs": len(texts), "words": sum(len(t.split()) for t in texts)}
    res["shingles"] = sum(len(shingles(t, params.n_grams)) for t in texts)  # also warms caches and imports

    # ours, on everything
    sigs = signatures(texts[:20], params)
    res["ours_cpu"] = best_cpu(lambda: signatures(texts, params), args.repeats)
    sigs = signatures(texts, params)
    res["ours_signed"] = int(sum(not is_empty_signature(s) for s in sigs))
    res["shingling_cpu"] = best_cpu(lambda: [shingles(t, params.n_grams) for t in texts], 1)

    # naive, on a subset, against ours on the same subset
    subset = [texts[i] for i in evenly_spaced(len(texts), args.naive_docs)]
    res["naive_docs"] = len(subset)
    res["naive_shingles"] = sum(len(shingles(t, params.n_grams)) for t in subset)

    def naive() -> None:
        for t in subset:
            m = MinHash(num_perm=params.num_perm, seed=params.seed)
            for s in shingles(t, params.n_grams):
                m.update(s)

    res["naive_cpu"] = best_cpu(naive, 1)
    res["ours_subset_cpu"] = best_cpu(lambda: signatures(subset, params), args.repeats)

    # datatrove, in its venv, on the same texts
    venv = ensure_datatrove_venv(args.venv.resolve())
    src = work / "jsonl"
    src.mkdir()
    with open(src / "docs.jsonl", "w", encoding="utf-8") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"id": str(i), "text": t}) + "\n")
    cmd = [
        venv["python"],
        str(DT_SCRIPT),
        "--input",
        str(src),
        "--work",
        str(work / "datatrove"),
        "--n-grams",
        str(params.n_grams),
        "--buckets",
        str(params.bands),
        "--hashes",
        str(params.rows),
        "--seed",
        str(params.seed),
    ]
    dt, wall, cpu = run_json_child(cmd, clean_env(), "datatrove MinhashDedupSignature")
    if dt["documents"] != len(texts):
        raise BenchFailure(f"datatrove's JsonlReader read {dt['documents']} documents of {len(texts)}")
    if dt["signed_documents"] == 0:
        raise BenchFailure("datatrove produced no signature")
    dt.update(child_wall_s=wall, child_cpu_s=cpu, versions=venv["versions"])
    res["datatrove"] = dt
    return res


def print_speed(r: dict) -> tuple[float, float]:
    n, dt = r["n_docs"], r["datatrove"]
    per_core = lambda docs, cpu: docs / cpu if cpu > 0 else float("inf")  # noqa: E731
    ours = per_core(n, r["ours_cpu"])
    step = per_core(n, dt["step_cpu_s"])
    core = per_core(n, dt["core_cpu_s"])
    # the whole child minus the extra bare-loop pass it also ran: what one datatrove process costs
    whole_cpu = dt["child_cpu_s"] - dt["core_cpu_s"]
    overhead = whole_cpu - dt["step_cpu_s"]
    print(
        f"  {n:,} documents, {r['words']:,} words; ours {r['shingles']:,} shingles "
        f"({r['shingles'] / n:.0f}/doc), datatrove {dt['shingles']:,} n-grams ({dt['shingles'] / n:.0f}/doc)"
    )
    print(
        f"  signed: ours {r['ours_signed']:,}, datatrove {dt['signed_documents']:,}; {dt['versions']}, {dt['config']}\n"
    )
    rows = [
        ("ours: signatures() (numpy shingle hashes, datasketch bulk)", r["ours_cpu"], ours, r["shingles"]),
        (
            "  of which shingling (normalise + 5-grams)",
            r["shingling_cpu"],
            per_core(n, r["shingling_cpu"]),
            r["shingles"],
        ),
        ("datatrove: MinhashDedupSignature.run", dt["step_cpu_s"], step, dt["shingles"]),
        ("datatrove: get_shingles + get_signature loop only", dt["core_cpu_s"], core, dt["shingles"]),
        ("datatrove whole process (start-up + read + run)", whole_cpu, per_core(n, whole_cpu), dt["shingles"]),
    ]
    print(f"  {'':<50}{'CPU s':>8}{'sigs/s/core':>13}{'ns/shingle':>12}")
    for name, cpu, rate, n_sh in rows:
        print(f"  {name:<50}{cpu:>8.2f}{rate:>13,.0f}{cpu / n_sh * 1e9:>12,.0f}")
    print(
        f"  datatrove start-up + imports + JsonlReader, not in the ratio: {overhead:.2f} CPU s "
        f"(imports and step set-up {dt['imports_cpu_s']:.2f}, reader {dt['reader_cpu_s']:.2f})"
    )
    vs_dt = ours / step
    print(
        f"  ratio ours / datatrove step: {vs_dt:.2f}x (goal >= {GOAL_VS_DATATROVE}x: "
        f"{'met' if vs_dt >= GOAL_VS_DATATROVE else 'NOT met'}); vs its bare signature loop "
        f"{ours / core:.2f}x; vs its whole process {ours / per_core(n, whole_cpu):.2f}x"
    )
    k = r["naive_docs"]
    naive, ours_sub = per_core(k, r["naive_cpu"]), per_core(k, r["ours_subset_cpu"])
    vs_naive = ours_sub / naive
    print(
        f"\n  naive (MinHash(num_perm=112, seed=1), update() per shingle) on {k:,} evenly spaced documents "
        f"({r['naive_shingles']:,} shingles):"
    )
    print(f"  {'naive':<50}{r['naive_cpu']:>8.2f}{naive:>13,.0f}{r['naive_cpu'] / r['naive_shingles'] * 1e9:>12,.0f}")
    print(
        f"  {'ours, same documents':<50}{r['ours_subset_cpu']:>8.2f}{ours_sub:>13,.0f}"
        f"{r['ours_subset_cpu'] / r['naive_shingles'] * 1e9:>12,.0f}"
    )
    print(
        f"  ratio ours / naive: {vs_naive:.1f}x (goal >= {GOAL_VS_NAIVE:.0f}x: "
        f"{'met' if vs_naive >= GOAL_VS_NAIVE else 'NOT met'})"
    )
    return vs_dt, vs_naive


# ---- part 2: generated band hashes --------------------------------------------------------------------------


@dataclass(frozen=True)
class Planted:
    """Documents 0..n_docs-1 in canonical order; `members[k]` is a planted duplicate of `sources[k]` (its
    group's earliest document), sharing the bands where `share[k]` is True."""

    n_docs: int
    bands: int
    seed: int
    crawl_starts: list[int]
    members: np.ndarray
    sources: np.ndarray
    share: np.ndarray
    groups: int

    def band_column(self, band: int) -> np.ndarray:
        """Band `band`'s int64 hash of every document: random, except planted members copy their source's."""
        info = np.iinfo(np.int64)
        h = np.random.default_rng([self.seed, 1000 + band]).integers(info.min, info.max, self.n_docs, np.int64)
        mask = self.share[:, band]
        h[self.members[mask]] = h[self.sources[mask]]
        return h

    def expected_cluster_of(self) -> np.ndarray:
        out = np.arange(self.n_docs, dtype=np.int64)
        out[self.members] = self.sources
        return out

    def doc_ids(self) -> list[str]:
        """32-hex doc_ids, ascending within each crawl, so (crawl, doc_id) order is index order."""
        rng = np.random.default_rng([self.seed, 7])
        hi = rng.integers(0, np.iinfo(np.uint64).max, self.n_docs, np.uint64, endpoint=True)
        lo = rng.integers(0, np.iinfo(np.uint64).max, self.n_docs, np.uint64, endpoint=True)
        bounds = self.crawl_starts + [self.n_docs]
        for s, e in zip(bounds[:-1], bounds[1:]):
            order = np.lexsort((lo[s:e], hi[s:e]))
            hi[s:e], lo[s:e] = hi[s:e][order], lo[s:e][order]
        return [f"{a:016x}{b:016x}" for a, b in zip(hi.tolist(), lo.tolist())]


def plant(
    n_docs: int, crawls: int, dup_fraction: float, big_groups: int, big_size: int, bands: int = 14, seed: int = 0
) -> Planted:
    """Near-duplicate groups over random documents; deterministic in its arguments."""
    rng = np.random.default_rng([seed, 1])
    sizes: list[int] = []
    target = int(n_docs * dup_fraction)
    while sum(sizes) < target:
        sizes += rng.integers(2, 7, max(1, (target - sum(sizes)) // 4)).tolist()
    sizes = sizes[: np.searchsorted(np.cumsum(sizes), target) + 1] + [big_size] * big_groups
    total = sum(sizes)
    if total > n_docs:
        raise BenchFailure(f"--dup-fraction/--big-groups plant {total} documents but --docs is {n_docs}")
    chosen = rng.permutation(n_docs)[:total]
    group = np.repeat(np.arange(len(sizes)), sizes)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    source_of_group = np.minimum.reduceat(chosen, starts)
    is_member = chosen != source_of_group[group]
    members, sources = chosen[is_member], source_of_group[group][is_member]
    share = rng.random((len(members), bands)) < 0.5
    none = ~share.any(axis=1)
    share[np.flatnonzero(none), rng.integers(0, bands, int(none.sum()))] = True
    big = group[is_member] >= len(sizes) - big_groups
    share[big, 0] = True  # a template: one bucket of big_size documents in band 0 at least
    crawl_starts = [int(k * n_docs // crawls) for k in range(crawls)]
    order = np.argsort(members, kind="stable")
    return Planted(n_docs, bands, seed, crawl_starts, members[order], sources[order], share[order], len(sizes))


def planted_from(args) -> Planted:
    return plant(args.docs, args.crawls, args.dup_fraction, args.big_groups, args.big_size, seed=args.seed)


def check_clusters(planted: Planted, cluster_of: np.ndarray) -> dict:
    expected = planted.expected_cluster_of()
    wrong = np.flatnonzero(cluster_of != expected)
    return {
        "groups": planted.groups,
        "members": int(len(planted.members)),
        "near_duplicates": int((cluster_of != np.arange(planted.n_docs)).sum()),
        "wrong_documents": int(len(wrong)),
        "wrong_examples": wrong[:5].tolist(),
    }


def child_pure(args) -> dict:
    """Pure path in this (fresh) process: band by band candidates, merge, crawl-ordered clustering."""
    from assets.dedup.clustering import band_candidate_pairs, cluster_crawl_ordered, merge_edges

    planted = planted_from(args)
    out = {"rss_after_setup": proc_status_bytes("VmRSS")}
    index = np.arange(planted.n_docs, dtype=np.int64)
    gen_cpu = cand_cpu = 0.0
    cpu0, t0 = cpu_self(), time.perf_counter()
    per_band = []
    for b in range(planted.bands):
        c = cpu_self()
        column = planted.band_column(b)  # stands in for reading one band from Iceberg
        gen_cpu += cpu_self() - c
        c = cpu_self()
        per_band.append(band_candidate_pairs(index, column))
        cand_cpu += cpu_self() - c
        del column
    c = cpu_self()
    edges = merge_edges(per_band)
    del per_band
    merge_cpu = cpu_self() - c
    c = cpu_self()
    clusters = cluster_crawl_ordered(planted.crawl_starts, planted.n_docs, edges)
    cluster_cpu = cpu_self() - c
    out.update(
        wall_s=time.perf_counter() - t0,
        cpu_s=cpu_self() - cpu0,
        generate_cpu_s=gen_cpu,
        candidates_cpu_s=cand_cpu,
        merge_cpu_s=merge_cpu,
        cluster_cpu_s=cluster_cpu,
        edges=int(len(edges)),
        peak_rss=proc_status_bytes("VmHWM"),
    )
    out["check"] = check_clusters(planted, clusters.cluster_of)
    return out


def _bands_tables(ids: np.ndarray, hashes: np.ndarray, crawl: str):
    """Band rows of some documents (hashes: (n, bands)) as dedup_minhash writes them: one table per band (each
    becomes its own row group), sorted by band_hash."""
    import pyarrow as pa

    n, bands = hashes.shape
    for b in range(bands):
        yield pa.table(
            {
                "doc_id": ids,
                "crawl": pa.array([crawl] * n, pa.string()),
                "segment": pa.array(["s"] * n, pa.string()),
                "band": np.full(n, b, np.int32),
                "band_hash": hashes[:, b],
            }
        ).sort_by([("band_hash", "ascending"), ("doc_id", "ascending")])


def child_asset_write(args) -> dict:
    """Setup for the asset path: the generated bands as dedup.minhash_bands, one partition per crawl."""
    from iceberg_catalog import Lakehouse, Provenance, config_hash
    from iceberg_catalog.schemas import DEDUP_MINHASH_BANDS

    planted = planted_from(args)
    ids = np.array(planted.doc_ids(), dtype=object)
    columns = np.stack([planted.band_column(b) for b in range(planted.bands)], axis=1)  # (n_docs, bands)
    lakehouse = Lakehouse()
    bounds = planted.crawl_starts + [planted.n_docs]
    rows = 0
    for k, (s, e) in enumerate(zip(bounds[:-1], bounds[1:])):
        crawl = f"CRAWL-{k:02d}"
        writer = lakehouse.writer(DEDUP_MINHASH_BANDS, {"crawl": crawl, "segment": "s"})
        # per batch of --batch-docs documents, one sorted row group per band, as dedup_minhash writes them
        for b in range(s, e, args.batch_docs):
            end = min(b + args.batch_docs, e)
            for table in _bands_tables(ids[b:end], columns[b:end], crawl):
                writer.write(table)
        prov = Provenance(
            asset_key="dedup/minhash_bands",
            partition_key=f"{crawl}/s",
            run_id="bench-dedup",
            code_version="bench",
            config_hash=config_hash({"bench": "dedup", "seed": args.seed}),
        )
        rows += writer.commit(prov).rows
    return {"rows": rows, "partitions": len(planted.crawl_starts)}


def child_asset_run(args) -> dict:
    """`dedup/near_duplicates` with verify="none" through Dagster, in this fresh process; then the check."""
    import dagster as dg

    from orchestration.instance import prepare_dagster_home

    prepare_dagster_home()
    from assets.dedup.defs import NEAR_DUPLICATES, defs
    from iceberg_catalog import Lakehouse
    from iceberg_catalog.schemas import DEDUP_NEAR_DUPLICATES
    from resources import IcebergCatalogResource
    from resources.executor import TaskExecutorResource

    assets = list(defs.assets)
    op_name = next(a for a in assets if NEAR_DUPLICATES in a.keys).op.name
    out = {"rss_after_imports": proc_status_bytes("VmRSS")}
    with dg.DagsterInstance.get() as instance:
        cpu0, t0 = cpu_self(), time.perf_counter()
        res = dg.materialize(
            assets,
            instance=instance,
            resources={"catalog": IcebergCatalogResource(), "executor": TaskExecutorResource()},
            selection=dg.AssetSelection.assets(NEAR_DUPLICATES),
            raise_on_error=False,
            run_config={**QUIET_LOGGERS, "ops": {op_name: {"config": {"verify": "none"}}}},
        )
        out.update(wall_s=time.perf_counter() - t0, cpu_s=cpu_self() - cpu0, peak_rss=proc_status_bytes("VmHWM"))
        if not res.success:
            errors = [
                str(e.event_specific_data.error.message).strip()
                for e in res.all_events
                if e.is_failure and getattr(e.event_specific_data, "error", None) is not None
            ]
            raise SystemExit(f"dedup/near_duplicates failed: {errors[-1] if errors else 'no error message'}")
        md = res.asset_materializations_for_node(op_name)[0].metadata
        out["metadata"] = {
            k: md[k].value
            for k in (
                "documents",
                "bands",
                "candidate_pairs",
                "verified_pairs",
                "clusters",
                "near_duplicates",
                "seconds",
            )
        }
    near = Lakehouse().scan(DEDUP_NEAR_DUPLICATES, ("doc_id", "cluster_id"))
    planted = planted_from(args)
    position = {d: i for i, d in enumerate(planted.doc_ids())}
    cluster_of = np.arange(planted.n_docs, dtype=np.int64)
    for d, c in zip(near["doc_id"].to_pylist(), near["cluster_id"].to_pylist()):
        cluster_of[position[d]] = position[c]
    out["check"] = check_clusters(planted, cluster_of)
    out["rows"] = near.num_rows
    return out


def run_child_step(step: str, args, home: Path | None) -> tuple[dict, float, float]:
    cmd = child_command(
        __file__,
        step,
        docs=args.docs,
        crawls=args.crawls,
        dup_fraction=args.dup_fraction,
        big_groups=args.big_groups,
        big_size=args.big_size,
        seed=args.seed,
        batch_docs=args.batch_docs,
    )
    return run_json_child(cmd, ours_env(home), f"{step} child")


def print_check(check: dict) -> bool:
    ok = check["wrong_documents"] == 0
    print(
        f"  planted clusters: {check['groups']:,} groups, {check['members']:,} duplicates; found "
        f"{check['near_duplicates']:,} near duplicates -> "
        + (
            "all recovered exactly (same members, earliest member canonical), nothing else clustered"
            if ok
            else f"NOT recovered: {check['wrong_documents']:,} documents differ "
            f"(e.g. indices {check['wrong_examples']})"
        )
    )
    return ok


# ---- main ---------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-docs", type=int, default=0, help="real documents for part 1 (0: all, ~3,700)")
    parser.add_argument("--chunk-words", type=int, default=500, help="words per real document")
    parser.add_argument("--naive-docs", type=int, default=500, help="documents for the naive baseline")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of ours (least CPU kept)")
    parser.add_argument("--venv", type=Path, default=DT_VENV, help="datatrove's venv (created if missing)")
    parser.add_argument("--docs", type=int, default=1_000_000, help="documents for part 2 (generated)")
    parser.add_argument("--crawls", type=int, default=10)
    parser.add_argument("--dup-fraction", type=float, default=0.05, help="share of documents in planted groups")
    parser.add_argument("--big-groups", type=int, default=3, help="planted template groups past the pair cap")
    parser.add_argument("--big-size", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--batch-docs", type=int, default=2000, help="documents per written batch (dedup_minhash's default batch_docs)"
    )
    parser.add_argument("--no-speed", action="store_true", help="skip part 1")
    parser.add_argument("--no-asset", action="store_true", help="skip part 2 (b), the Iceberg + Dagster path")
    parser.add_argument("--child", choices=["pure", "asset-write", "asset-run"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        fn = {"pure": child_pure, "asset-write": child_asset_write, "asset-run": child_asset_run}[args.child]
        print(json.dumps(fn(args)))
        return 0

    return run_reported("dedup", lambda work: run_bench(args, work))


def run_bench(args, work: Path) -> int:
    ok = True
    if not args.no_speed:
        texts, notes = load_corpus(args.chunk_words)
        if args.max_docs:
            texts = [texts[i] for i in evenly_spaced(len(texts), args.max_docs)]
        print("1. MinHash signatures per core (5-grams, 14 bands x 8 rows, seed 1), same documents:")
        for note in notes:
            print(f"  {note}")
        print_speed(signature_speed(texts, args, work))

    print(
        f"\n2. Clustering {args.docs:,} documents x 14 bands of generated band hashes over {args.crawls} crawls "
        f"({args.dup_fraction:.0%} in planted groups of 2-6, plus {args.big_groups} template groups of "
        f"{args.big_size}); fresh process each, peak RSS = VmHWM"
    )
    pure, wall, _ = run_child_step("pure", args, None)
    print(
        f"  (a) pure path: {pure['wall_s']:.1f} s wall, {pure['cpu_s']:.1f} CPU s "
        f"(generating the band columns {pure['generate_cpu_s']:.1f}, band_candidate_pairs "
        f"{pure['candidates_cpu_s']:.1f}, merge_edges {pure['merge_cpu_s']:.1f}, cluster_crawl_ordered "
        f"{pure['cluster_cpu_s']:.1f}); {pure['edges']:,} edges"
    )
    print(
        f"      peak RSS {mib(pure['peak_rss'])} (after setup {mib(pure['rss_after_setup'])}); goal < 2 GiB: "
        f"{'met' if pure['peak_rss'] < RSS_GOAL_BYTES else 'NOT met'}"
    )
    ok &= print_check(pure["check"])

    if not args.no_asset:
        home = work / "home"
        written, wall, _ = run_child_step("asset-write", args, home)
        print(
            f"  (b) asset path: wrote {written['rows']:,} rows into dedup.minhash_bands ({written['partitions']} "
            f"partitions) in {wall:.0f} s (setup, not timed below)"
        )
        run, wall, cpu = run_child_step("asset-run", args, home)
        md = run["metadata"]
        print(
            f"      dedup/near_duplicates (no verification) through Dagster: {run['wall_s']:.1f} s wall, "
            f"{run['cpu_s']:.1f} CPU s (the asset's own `seconds`: {md['seconds']}); whole child process "
            f"{wall:.1f} s wall, {cpu:.1f} CPU s"
        )
        print(
            f"      {md['documents']:,} documents, {md['bands']} bands, {md['candidate_pairs']:,} candidate pairs, "
            f"{md['clusters']:,} clusters, {md['near_duplicates']:,} near duplicates, {run['rows']:,} rows written"
        )
        print(
            f"      peak RSS {mib(run['peak_rss'])} (after imports {mib(run['rss_after_imports'])}); goal < 2 GiB: "
            f"{'met' if run['peak_rss'] < RSS_GOAL_BYTES else 'NOT met'}"
        )
        ok &= print_check(run["check"])
    if not ok:
        raise BenchFailure("planted near-duplicate clusters were not recovered (see above)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
