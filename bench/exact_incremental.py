"""What an incremental exact-dedup run costs as the corpus grows: add a crawl of N documents to a corpus of N and
of 8N documents and time the `curated/exact_duplicates` run that follows (only the new crawl is recomputed).

Synthetic curated.documents rows (no text; ~10% of the documents repeat the text hash of an earlier document,
in any crawl up to their own; ~5% not kept) are written straight into an embedded lakehouse in a temp dir, one
crawl of 4 segments at a time; the asset runs through Dagster in-process (in_process executor, --shards tasks):
first over the base corpus (everything), then after the new crawl is added (incremental). Bytes read: the sum,
over the tasks, of the sizes of the data files in each task's scan plan (`bytes_scanned`, whole files; the tasks
fetch only their 6 columns' chunks) -- every task plans every file, since a file's hashes span the whole range.
The earlier crawls' rows are hashed (`rows_digest`) before and after the incremental run.

    python bench/exact_incremental.py [--docs 100000] [--shards 16] [--json]

`--json` prints one JSON object on its own line: {"n", "shards", "cases": [{"base_docs", "added_docs",
"full_s", "incremental_s", "incremental_bytes_read", "recomputed", "earlier_sha256_before", "earlier_sha256_after"}],
"time_ratio", "bytes_ratio"} (ratios: the 8N case over the N case).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEGMENTS = 4
DUPLICATE_SHARE = 0.10
NOT_KEPT_SHARE = 0.05


def crawl_name(k: int) -> str:
    return f"CC-MAIN-2030-{k:02d}"


def crawl_rows(k: int, n: int, seen: list[str], rng: random.Random):
    """Crawl `k`'s `n` documents as an Arrow table of curated.documents (declared columns, unused ones null);
    `seen` (every distinct hash so far, this crawl's included) grows by the crawl's new hashes."""
    import pyarrow as pa

    from iceberg_catalog.schemas import CURATED_DOCUMENTS

    crawl = crawl_name(k)
    ids = [f"{crawl}-{i:08d}" for i in range(n)]
    hashes = []
    for i in range(n):
        if seen and rng.random() < DUPLICATE_SHARE:
            hashes.append(rng.choice(seen))
        else:
            hashes.append(hashlib.sha256(f"{crawl} {i}".encode()).hexdigest())
            seen.append(hashes[-1])
    kept = [rng.random() >= NOT_KEPT_SHARE for _ in range(n)]
    values = {
        "doc_id": ids,
        "record_id": ids,
        "deletion_key": ids,
        "crawl": [crawl] * n,
        "segment": [f"seg-{i % SEGMENTS}" for i in range(n)],
        "url": [f"https://example.org/{d}" for d in ids],
        "kept": kept,
        "decision": [None if k else "too_short" for k in kept],
        "text_sha256": hashes,
    }
    schema = CURATED_DOCUMENTS.arrow_schema
    cols = [pa.array(values[f.name], f.type) if f.name in values else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def write_crawl(lakehouse, k: int, n: int, seen: list[str], rng: random.Random) -> None:
    """Crawl `k` into curated.documents, one partition commit per segment."""
    import pyarrow.compute as pc

    from iceberg_catalog import Provenance
    from iceberg_catalog.schemas import CURATED_DOCUMENTS

    table = crawl_rows(k, n, seen, rng)
    for s in range(SEGMENTS):
        segment = f"seg-{s}"
        writer = lakehouse.writer(CURATED_DOCUMENTS, {"crawl": crawl_name(k), "segment": segment})
        writer.write(table.filter(pc.field("segment") == segment))
        writer.commit(Provenance("curated/documents", f"{crawl_name(k)}/{segment}", "bench", "bench", "bench"))


def materialize(instance, shards: int) -> tuple[float, dict]:
    """Run the exact-dedup asset once: (wall seconds, its metadata values)."""
    import dagster as dg

    from assets.curated import defs as curated_defs
    from resources import IcebergCatalogResource, TaskExecutorResource

    t0 = time.perf_counter()
    res = dg.materialize(
        [curated_defs.exact_duplicates],
        instance=instance,
        resources={"catalog": IcebergCatalogResource(), "executor": TaskExecutorResource(kind="in_process")},
        run_config={
            "ops": {"curated__exact_duplicates": {"config": {"shards": shards}}},
            "loggers": {"console": {"config": {"log_level": "WARNING"}}},  # only the bench's own lines
        },
    )
    seconds = time.perf_counter() - t0
    md = res.asset_materializations_for_node("curated__exact_duplicates")[0].metadata
    return seconds, {k: v.value for k, v in md.items()}


def earlier_digest(lakehouse, before: str) -> str:
    """rows_digest of curated.exact_duplicates' rows of the crawls before `before`."""
    from pyiceberg.expressions import LessThan

    from iceberg_catalog.digest import rows_digest
    from iceberg_catalog.schemas import CURATED_EXACT_DUPLICATES

    return rows_digest(lakehouse.scan(CURATED_EXACT_DUPLICATES, row_filter=LessThan("crawl", before)))


def case(work: Path, base_crawls: int, n: int, shards: int) -> dict:
    """`base_crawls` crawls of `n` documents, a full run, then one more crawl and the incremental run."""
    import dagster as dg

    from iceberg_catalog import Lakehouse

    os.environ["TOKENLAKE_HOME"] = str(work)
    lakehouse = Lakehouse()
    rng, seen = random.Random(1234), []
    for k in range(base_crawls):
        write_crawl(lakehouse, k, n, seen, rng)
    with dg.DagsterInstance.ephemeral() as instance:
        full_s, _ = materialize(instance, shards)
        new = crawl_name(base_crawls)
        before = earlier_digest(lakehouse, new)
        write_crawl(lakehouse, base_crawls, n, seen, rng)
        inc_s, md = materialize(instance, shards)
    return {
        "base_docs": base_crawls * n,
        "added_docs": n,
        "full_s": round(full_s, 2),
        "incremental_s": round(inc_s, 2),
        "incremental_bytes_read": md["bytes_scanned"],
        "recomputed": md["recomputed_crawls"],
        "duplicates": md["dagster/row_count"],
        "earlier_sha256_before": before,
        "earlier_sha256_after": earlier_digest(lakehouse, new),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100_000, help="N: documents per crawl")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="exact-incremental-") as tmp:
        cases = [case(Path(tmp) / f"base{b}", b, args.docs, args.shards) for b in (1, 8)]
    small, large = cases
    out = {
        "n": args.docs,
        "shards": args.shards,
        "cases": cases,
        "time_ratio": round(large["incremental_s"] / small["incremental_s"], 2),
        "bytes_ratio": round(large["incremental_bytes_read"] / small["incremental_bytes_read"], 2),
    }
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        for c in cases:
            same = c["earlier_sha256_before"] == c["earlier_sha256_after"]
            print(
                f"{c['base_docs']:>9,} + {c['added_docs']:,} docs: full {c['full_s']} s, incremental "
                f"{c['incremental_s']} s, {c['incremental_bytes_read']:,} B read, recomputed {c['recomputed']}, "
                f"earlier crawls' rows {'identical' if same else 'CHANGED'}"
            )
        print(f"8N/N: time {out['time_ratio']}x, bytes {out['bytes_ratio']}x")
    return 0 if all(c["earlier_sha256_before"] == c["earlier_sha256_after"] for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
