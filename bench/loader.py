"""Loader bench: tokens/s per worker, data-wait at a simulated 1M tokens/s/rank consumer, time to first batch on
a run view of >= 10,000 row groups, and the cost of `state_dict()`; each against a baseline from the same run.

Input (untimed setup): the Wikipedia excerpt (data/corpus) tokenized with the repo's GPT-2 tokenizer, 4,572
real paragraphs, repeated under distinct doc ids to `--docs` documents (4.8M tokens by default), written as
`tokenized.documents` (plus curated.documents, screening) into two temp lakehouses and published as a run view
with the project's own store code (candidate, blocking checks, approval):
  - "prod": `--docs-per-row-group` 1,024 (the tokenize asset's default row group), for throughput;
  - "wide": 4 documents per row group, so `--docs` 40,960 gives 10,240 row groups, for start-up.

1. Throughput per worker, median of `--repeats` rounds over `--steps` steps of `--global-batch` x `--seq-len`
   (world 1), each side reading the same token stream:
   - limit: a numpy memmap of the view's tokens (uint16, sample order), batches of B contiguous seq_len+1
     windows -> int64 input_ids and labels (nanoGPT / Megatron style: no shuffle, no checksums, no masks);
   - ours: RunViewLoader over the "prod" view (block shuffle, sha256 of every row group against the digest the
     view was published with (per document where one does not match), packing with
     labels / loss_mask / position_ids / segment_ids / cu_seqlens, audit spans), in process, with a prefetch
     thread, and with 2 DataLoader worker processes (aggregate / 2 = per worker, over `--worker-steps` steps
     after each worker's first item: a worker hands over two block windows of steps at a time);
   - where ours spends its CPU (untimed pass, in process without read-ahead): thread CPU ns per token of the
     row-group read, the per-document checks, the window gather, the packing, the tensors and audit spans, and
     the rest (`cpu_breakdown_ns_per_token` in the JSON);
   - MosaicML streaming (`StreamingDataset`, local MDS shards of the same tokens cut into seq_len samples,
     shuffled, decoded to input_ids and labels), in its own venv `bench/out/venvs/mosaic-streaming` made here
     from PyPI (torch pinned to the local CPU wheel); when it does not install, the output says so.
2. Data-wait: rank 0 of world 8 (global batch 8 x `--global-batch`, so the same tokens per rank per step)
   with a consumer that "computes" at 1M tokens/s (sleeps tokens/1e6 s per step): fraction of wall time in
   `next()`, without and with prefetch, against the memmap with the same consumer.
3. Time to first batch on the "wide" view (>= 10,000 row groups), fresh process each, median of `--repeats`:
   import, open (`open_run_view(id)` as training code calls it: the configured catalog, here the embedded one
   under TOKENLAKE_HOME; manifest, samples at the tag, the layout published with the view; views without
   one read the doc_id column of every row group), loader, first batch; which of pandas, sqlalchemy and
   pyarrow.dataset the child imported on the way (`first_batch_heavy_imports`: none is needed); also
   from an exported bundle; baseline: reading just the Parquet footers of the token files (pyarrow).
4. `state_dict()`: microseconds per call (and `load_state_dict` + first batch at step 10^6) as a share of the
   loader's own step time and of the 1M tokens/s step.

Defaults take about 4-8 minutes on 2 cores (untimed setup 1.5-5 min; Mosaic's venv ~3 min, once).

    python bench/loader.py [--docs 40960] [--seq-len 2048] [--global-batch 8] [--steps 60] [--repeats 3]
                           [--worker-steps 4000]
                           [--skip-mosaic] [--mosaic-venv DIR]

Exits 1 when a measurement fails (the sides disagree on tokens, the view has < 10,000 row groups, a child
fails); 2 when an input file is missing.
"""

from __future__ import annotations

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import lzma  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys
import time  # noqa: E402
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assets.curated.models import REFERENCE_CORPUS as CORPUS  # noqa: E402
from bench.common import BenchFailure, clean_env, ensure_venv, run_reported  # noqa: E402

GPT2 = ROOT / "data" / "tokenizers" / "gpt2_tokenizer.json"
MOSAIC_VENV = ROOT / "bench" / "out" / "venvs" / "mosaic-streaming"
# streaming pins numpy<2.2 and pulls torchvision, which do not sit beside our torch: hence its own venv;
# torch pinned so pip takes the machine's local CPU wheel instead of a multi-GB CUDA build
MOSAIC_REQUIREMENTS = ["mosaicml-streaming==0.13.0", "torch==2.13.0"]
CONSUMER_TOKENS_PER_S = 1_000_000
SEGMENTS = 8
MIN_ROW_GROUPS = 10_000
WIDE_DOCS_PER_ROW_GROUP = 4


# ---- input ---------------------------------------------------------------------------------------------------


def corpus_paragraphs(path: Path = CORPUS, min_chars: int = 200, max_chars: int = 1500) -> list[str]:
    """Real Wikipedia paragraphs (>= min_chars, cut at max_chars), in file order."""
    if not path.is_file():
        raise FileNotFoundError(f"corpus {path} is missing (it ships with the repo under data/corpus/)")
    text = lzma.open(path, "rt", encoding="utf-8").read()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("<")]
    return [ln[:max_chars] for ln in lines if len(ln) >= min_chars]


def write_lakehouse(
    home: Path, texts: list[str], arrays: list, n_docs: int, docs_per_row_group: int, seq_len: int, lt
) -> str:
    """A temp lakehouse with `n_docs` documents (paragraph i % P under doc id i) in SEGMENTS segments, screened,
    and a published run view over all of them; returns its id."""
    import pyarrow as pa

    from assets.run_view import store
    from assets.run_view.mixture import Component
    from assets.tokenized.tokens import tokenizer_row, tokens_checksum
    from iceberg_catalog import CatalogConfig, Lakehouse, Provenance, TableDef
    from iceberg_catalog.schemas import CURATED_DOCUMENTS, TOKENIZED_DOCUMENTS, TOKENIZED_TOKENIZERS
    from tests.run_view import builders

    lakehouse = Lakehouse(CatalogConfig.embedded(home))

    def write(
        t: TableDef,
        partition: dict,
        rows: list[dict],
        row_group_rows: int | None = None,
        partition_key: str | None = None,
    ) -> None:
        writer = lakehouse.writer(t, partition, row_group_rows=row_group_rows)
        if rows:
            writer.write(pa.Table.from_pylist(rows, schema=t.arrow_schema))
        writer.commit(Provenance(t.identifier, partition_key, "bench-loader", "bench", "bench"))

    info = lt.info
    write(
        TOKENIZED_TOKENIZERS,
        {"tokenizer_id": info.tokenizer_id},
        tokenizer_row(lt).to_pylist(),
    )
    token_bytes = [a.tobytes() for a in arrays]
    shas = [tokens_checksum(b) for b in token_bytes]
    per_segment = -(-n_docs // SEGMENTS)
    for s in range(SEGMENTS):
        crawl, segment = "BENCH-LOADER", f"seg-{s:02d}"
        curated, tokenized = [], []
        for i in range(s * per_segment, min(n_docs, (s + 1) * per_segment)):
            p = i % len(texts)
            url = f"https://en.wikipedia.org/wiki/bench-{i}"
            common = builders.document_ids(url, crawl, segment)
            curated.append(
                {**common, "url": url, "text": texts[p], "kept": True, "language": "en", "ppl_bucket": "middle"}
            )
            tokenized.append(
                {
                    "tokenizer_id": info.tokenizer_id,
                    **common,
                    "tokens": token_bytes[p],
                    "n_tokens": len(arrays[p]),
                    "token_dtype": info.token_dtype,
                    "tokens_sha256": shas[p],
                    "language": "en",
                    "ppl_bucket": "middle",
                    "host": "en.wikipedia.org",
                    "domain_class": "org",
                }
            )
        write(CURATED_DOCUMENTS, {"crawl": crawl, "segment": segment}, curated)
        write(
            TOKENIZED_DOCUMENTS,
            {"tokenizer_id": info.tokenizer_id, "crawl": crawl, "segment": segment},
            tokenized,
            row_group_rows=docs_per_row_group,
        )
    # screening, the gate's checks and the approval exactly as the run view tests do them (the lead's builders)
    builders.screen(lakehouse, segments=[f"BENCH-LOADER/seg-{s:02d}" for s in range(SEGMENTS)])
    spec = store.RunViewSpec(
        name="bench", tokenizer="gpt2", seed=0, seq_len=seq_len, components=[Component("all", 1.0)]
    )
    result = store.build_candidate(lakehouse, spec, builders.provenance("run_view/candidate", "bench-loader"))
    try:
        builders.publish(lakehouse, result, reviewer="bench")  # runs the four blocking checks, then approves
    except store.RunViewRefused as exc:
        raise BenchFailure(f"the bench run view was not published: {exc}") from exc
    return result.run_view_id


def open_view(home: Path, run_view_id: str):
    """The view as training code opens it from an embedded catalog (`open_run_view(id)` reads through
    `iceberg_catalog.readonly`: no SQLAlchemy engine left behind for the garbage collector)."""
    from iceberg_catalog import CatalogConfig
    from iceberg_catalog.readonly import read_only_catalog
    from loader import open_run_view

    return open_run_view(run_view_id, catalog=read_only_catalog(CatalogConfig.embedded(home)))


def write_flat_tokens(view, path: Path) -> int:
    """The view's tokens in sample order as one uint16 file (the memmap and Mosaic inputs); returns tokens."""
    import numpy as np

    order = list(range(view.n_samples))
    total = 0
    with open(path, "wb") as fh:
        for start in range(0, len(order), 4096):
            got = view.source.read(order[start : start + 4096])
            for s in order[start : start + 4096]:
                arr = np.asarray(got[s], dtype=np.uint16)
                fh.write(arr.tobytes())
                total += len(arr)
    return total


# ---- 1. throughput ---------------------------------------------------------------------------------------------


def memmap_batches(path: Path, batch: int, seq_len: int, steps: int, start_seq: int = 0):
    """nanoGPT-style batches from a flat token memmap: B contiguous seq_len+1 windows -> input_ids, labels."""
    import numpy as np
    import torch

    mm = np.memmap(path, dtype=np.uint16, mode="r")
    n_seq = (len(mm) - 1) // seq_len
    k = start_seq
    for _ in range(steps):
        rows = []
        for _ in range(batch):
            off = (k % n_seq) * seq_len
            rows.append(mm[off : off + seq_len + 1])
            k += 1
        arr = np.stack(rows).astype(np.int64)
        yield {"input_ids": torch.from_numpy(arr[:, :-1]), "labels": torch.from_numpy(arr[:, 1:])}


def time_batches(batches, steps: int, consumer_s_per_token: float = 0.0, warmup: int = 1) -> dict:
    """Consume up to `steps` batches (sleeping n_tokens * consumer_s_per_token after each, a simulated training
    step): tokens, wall seconds, seconds blocked in next(), and the same after the first `warmup` batches
    (steady; 1: after the first batch). Starts with `gc.collect()`, untimed, for every reader: what the setup
    and earlier rounds left to the garbage collector (the view just opened, catalogs dropped, earlier rounds'
    loaders) is collected before the round, not by a collection that happens to fall inside its steps
    (measured with gc callbacks: a generation-0 collection inside the steps took 3.3-6.1 ms, a sixth of a
    60-step round, and which round it fell in depended on how many objects each had allocated so far). The
    loader leaves no cyclic garbage per batch (the same ~600 objects after 10 or 100 steps), so what is left
    in the round is its steady state, collections of its own allocations included."""
    gc.collect()
    it = iter(batches)
    tokens, wait = 0, 0.0
    first_tokens = first_wait = first_end = None
    t0 = time.perf_counter()
    for i in range(steps):
        t = time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            break
        wait += time.perf_counter() - t
        n = int(b["input_ids"].numel())
        tokens += n
        if i + 1 == warmup:
            first_tokens, first_wait, first_end = tokens, wait, time.perf_counter() - t0
            cpu0 = time.process_time()  # CPU of every thread of this process from here (not of worker processes)
        if consumer_s_per_token:
            time.sleep(n * consumer_s_per_token)
    seconds = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    close = getattr(it, "close", None)
    if close is not None:
        close()
    steady_s = seconds - first_end
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "wait_s": wait,
        "wait_fraction": wait / seconds,
        "first_s": first_end,
        "steady_tokens_per_s": (tokens - first_tokens) / steady_s,
        "steady_wait_fraction": (wait - first_wait) / steady_s,
        # CPU-seconds per token after the first batch, all threads of this process: what load on a shared
        # machine does not change (wall-clock rates there also depend on how much of a core each side got)
        "steady_cpu_ns_per_token": cpu_s / (tokens - first_tokens) * 1e9,
        "steps": steps,
    }


def worker_first_items(plan, start_step: int, num_workers: int = 2) -> int:
    """Steps in the first item of each of `num_workers` DataLoader workers of a loader started at `start_step`."""
    from loader.dataset import loader_chunks

    chunks = loader_chunks(plan, start_step, None)
    return sum(len(next(chunks)) for _ in range(num_workers))


def loader_round(
    home: Path,
    rv: str,
    args,
    *,
    prefetch: int | None = 0,
    num_workers: int = 0,
    world: int = 1,
    rank: int = 0,
    global_batch: int | None = None,
    start_step: int = 0,
    consumer_s_per_token: float = 0.0,
    warmup: int = 1,
    steps: int | None = None,
) -> dict:
    """One timed pass of RunViewLoader over a freshly opened view (row-group cache cold, page cache warm): the
    steady rate over `steps` (default `args.steps`) - 1 batches after the first `warmup`."""
    from loader import RunViewLoader, make_state

    view = open_view(home, rv)
    data = RunViewLoader(
        view,
        global_batch or args.global_batch,
        rank=rank,
        world_size=world,
        **({} if prefetch is None else {"prefetch": prefetch}),  # None: the loader's default
        num_workers=num_workers,
        seq_len=args.seq_len,
        multiprocessing_context="fork" if num_workers else None,
    )
    if start_step:
        data.load_state_dict(make_state(data.plan, start_step))
    return time_batches(data, (steps or args.steps) + warmup - 1, consumer_s_per_token, warmup)


# where the in-process loader's CPU goes: (label, module, class or None, function), each timed exclusive of the
# timed ones it calls
BREAKDOWN = (
    ("row-group read, decode, row-group sha256", "loader.sources", "RowGroupSource", "row_group_entry"),
    ("per-document checks", "loader.sources", "RowGroupSource", "check"),
    ("window gather (documents in serving order)", "loader.sources", "RowGroupSource", "read_stream"),
    ("packing (five int64 arrays, cu_seqlens, pieces)", "loader.plan", None, "pack_batch"),
    ("tensors and audit spans", "loader.plan", "BatchPlan", "_collate"),
)


def cpu_breakdown(home: Path, rv: str, args) -> dict:
    """Thread CPU nanoseconds per token of each BREAKDOWN part (exclusive of the parts it calls) and the rest
    ("other": loop, stream windows, metrics), the loader in process without read-ahead over `args.steps` steps
    after its first batch. Untimed elsewhere: the timers wrap the functions for this pass only."""
    import importlib

    from loader import RunViewLoader

    spent = dict.fromkeys([b[0] for b in BREAKDOWN], 0.0)
    stack: list[list] = []  # [label, CPU seconds of the timed parts it called]
    originals = []

    def timed(label, fn):
        def run(*a, **k):
            stack.append([label, 0.0])
            t0 = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                took = time.thread_time() - t0
                _, inner = stack.pop()
                spent[label] += took - inner
                if stack:
                    stack[-1][1] += took

        return run

    for label, module, cls, name in BREAKDOWN:
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, timed(label, getattr(owner, name)))
    try:
        data = RunViewLoader(open_view(home, rv), args.global_batch, seq_len=args.seq_len, prefetch=0)
        it = iter(data)
        next(it)
        for k in spent:
            spent[k] = 0.0
        tokens, t0 = 0, time.thread_time()
        for _ in range(args.steps - 1):
            tokens += int(next(it)["input_ids"].numel())
        total = time.thread_time() - t0
        it.close()
    finally:
        for owner, name, fn in originals:
            setattr(owner, name, fn)
    out = {label: sec / tokens * 1e9 for label, sec in spent.items()}
    out["other"] = (total - sum(spent.values())) / tokens * 1e9
    out["total"] = total / tokens * 1e9
    return out


# streaming/__init__ imports streaming.vision, which imports torchvision; PyPI's torchvision wheel is built for
# PyPI's CUDA torch and fails to register its ops beside the CPU torch ("operator torchvision::nms does not
# exist"). The text path measured here never touches vision, so the child stands in an empty module for it.
MOSAIC_STUB = "import sys, types; sys.modules['streaming.vision'] = types.ModuleType('streaming.vision')"

MOSAIC_SCRIPT = (
    MOSAIC_STUB
    + r"""
import json, sys, time
import numpy as np, torch
from streaming import MDSWriter, StreamingDataset
from streaming.base.util import clean_stale_shared_memory

flat, out, seq_len, batch, steps, repeats = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
tokens = np.fromfile(flat, dtype=np.uint16)
n = (len(tokens) - 1) // seq_len
t0 = time.perf_counter()
with MDSWriter(out=out, columns={"tokens": "bytes"}, compression=None, size_limit=1 << 26) as w:
    for i in range(n):
        w.write({"tokens": tokens[i * seq_len : i * seq_len + seq_len + 1].tobytes()})
write_s = time.perf_counter() - t0

def collate(samples):
    arr = np.stack([np.frombuffer(s["tokens"], dtype=np.uint16) for s in samples]).astype(np.int64)
    return {"input_ids": torch.from_numpy(arr[:, :-1]), "labels": torch.from_numpy(arr[:, 1:])}

rounds = []
for r in range(repeats + 1):  # round 0 warms the page cache and the index
    clean_stale_shared_memory()
    ds = StreamingDataset(local=out, shuffle=True, shuffle_seed=r, batch_size=batch)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=0, collate_fn=collate)
    tok, k, first = 0, 0, None
    t0 = time.perf_counter()
    for b in dl:
        tok += int(b["input_ids"].numel())
        k += 1
        if first is None:
            first = (time.perf_counter() - t0, tok)
        if k == steps:
            break
    seconds = time.perf_counter() - t0
    rounds.append({"tokens": tok, "seconds": seconds, "first_s": first[0],
                   "steady_tokens_per_s": (tok - first[1]) / (seconds - first[0])})
    del dl, ds
import streaming
print(json.dumps({"version": streaming.__version__, "samples": n, "write_s": write_s, "rounds": rounds[1:]}))
"""
)


def ensure_mosaic_venv(venv: Path) -> tuple[str | None, str]:
    """(python, note): Mosaic's venv, created from PyPI once; python None with the reason when it won't install."""
    try:
        python, install_s = ensure_venv(venv, MOSAIC_REQUIREMENTS, "MosaicML streaming")
    except BenchFailure as exc:
        return None, f"MosaicML streaming did not install from the registry: {str(exc).splitlines()[0]}"
    note = "reused" if install_s is None else f"installed in {install_s:.0f} s"
    check = (
        MOSAIC_STUB
        + "\nimport streaming, torch, numpy; print(streaming.__version__, torch.__version__, numpy.__version__)"
    )
    proc = subprocess.run([str(python), "-c", check], capture_output=True, text=True, env=clean_env())
    if proc.returncode != 0:
        return None, f"MosaicML streaming's venv {venv} does not import: {proc.stderr.strip().splitlines()[-1:]}"
    return str(python), f"{note}; streaming/torch/numpy {proc.stdout.strip()}"


def mosaic_rounds(python: str, flat: Path, work: Path, args) -> dict:
    script = work / "mosaic_bench.py"
    script.write_text(MOSAIC_SCRIPT)
    out = work / "mds"
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run(
        [
            python,
            str(script),
            str(flat),
            str(out),
            str(args.seq_len),
            str(args.global_batch),
            str(args.steps),
            str(args.repeats),
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=1800,
    )
    if proc.returncode != 0:
        raise BenchFailure(f"the MosaicML streaming child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- 3. time to first batch (child process) ---------------------------------------------------------------------


# modules a training process need not import to reach its first batch (an embedded catalog is read from its
# metadata files: iceberg_catalog.metadata_files)
HEAVY_IMPORTS = ("pyiceberg", "pydantic", "pandas", "sqlalchemy", "pyarrow.dataset", "yaml")


def child_ttfb(args) -> None:
    """In a fresh process: seconds to import, open, build the loader and get the first batch; prints JSON."""
    t0 = time.perf_counter()
    import torch  # noqa: F401 - timed alone: the floor of any loader that hands out torch tensors

    t_torch = time.perf_counter()
    from loader import RunViewLoader, open_run_view

    t_import = time.perf_counter()
    if args.bundle:
        view = open_run_view(bundle=args.bundle)
    else:  # as training code opens it: the configured catalog (here the embedded one under TOKENLAKE_HOME)
        view = open_run_view(args.run_view)
    t_open = time.perf_counter()
    data = RunViewLoader(view, args.global_batch * 8, rank=7, world_size=8, seq_len=args.seq_len)
    t_init = time.perf_counter()
    batch = next(iter(data))
    t_first = time.perf_counter()
    heavy = sorted(m for m in HEAVY_IMPORTS if m in sys.modules)
    import pyarrow.parquet as pq

    files = list(view.source.files)
    f0 = time.perf_counter()
    row_groups = sum(pq.read_metadata(f.removeprefix("file://")).num_row_groups for f in files)
    footers = time.perf_counter() - f0
    print(
        json.dumps(
            {
                "import_s": t_import - t0,
                "import_torch_s": t_torch - t0,
                "open_s": t_open - t_import,
                "init_s": t_init - t_open,
                "first_batch_s": t_first - t_init,
                "total_s": t_first - t0,
                "after_import_s": t_first - t_import,
                "footers_s": footers,
                "row_groups": row_groups,
                "files": len(files),
                "samples": view.n_samples,
                "tokens": int(batch["input_ids"].numel()),
                "heavy_imports": heavy,
            }
        )
    )


def ttfb_rounds(home: Path, rv: str, bundle: Path | None, args, layout_cache: Path | None = None) -> list[dict]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "ttfb",
        "--home",
        str(home),
        "--run-view",
        rv,
        "--seq-len",
        str(args.seq_len),
        "--global-batch",
        str(args.global_batch),
    ]
    if bundle is not None:
        cmd += ["--bundle", str(bundle)]
    env = {k: v for k, v in os.environ.items() if k not in ("TOKENLAKE_LAYOUT_CACHE", "TOKENLAKE_CATALOG")}
    env["PYTHONPATH"] = str(ROOT)
    env["TOKENLAKE_HOME"] = str(home)
    if layout_cache is not None:  # the node-local layout cache, filled by one untimed run first
        env["TOKENLAKE_LAYOUT_CACHE"] = str(layout_cache)
    out = []
    for r in range(args.repeats + (layout_cache is not None)):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise BenchFailure(f"time-to-first-batch child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        if layout_cache is None or r > 0:
            out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def med(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


# ---- the run ----------------------------------------------------------------------------------------------------


def run_bench(work: Path, args) -> int:
    from assets.tokenized.tokens import encode_documents, load_tokenizer
    from iceberg_catalog import CatalogConfig, open_catalog
    from loader import RunViewLoader, export_run_view

    docs_per_segment = -(-args.docs // SEGMENTS)  # ceiling division
    planned = SEGMENTS * -(-docs_per_segment // WIDE_DOCS_PER_ROW_GROUP)
    if planned < args.min_row_groups:
        raise BenchFailure(
            f"--docs {args.docs} gives the wide view {planned} row groups, fewer than "
            f"{args.min_row_groups}; raise --docs (or lower --min-row-groups for a smoke run)"
        )
    t_setup = time.perf_counter()
    texts = corpus_paragraphs()
    lt = load_tokenizer(GPT2, "gpt2")
    arrays = encode_documents(lt, texts)
    homes = {"prod": work / "lake-prod", "wide": work / "lake-wide"}
    views = {}
    for name, per_rg in (("prod", args.docs_per_row_group), ("wide", WIDE_DOCS_PER_ROW_GROUP)):
        views[name] = write_lakehouse(homes[name], texts, arrays, args.docs, per_rg, args.seq_len, lt)
    prod = open_view(homes["prod"], views["prod"])
    flat = work / "tokens.u16"
    n_tokens = write_flat_tokens(prod, flat)
    if n_tokens != prod.tokens_per_epoch:
        raise BenchFailure(f"flat token file holds {n_tokens} tokens, the view {prod.tokens_per_epoch}")
    bundle = export_run_view(
        views["wide"], work / "bundle-wide", catalog=open_catalog(CatalogConfig.embedded(homes["wide"]), create=False)
    )
    print(
        f"setup: {len(texts)} paragraphs -> {args.docs} documents, {n_tokens:,} GPT-2 tokens; views prod "
        f"{views['prod']} ({args.docs_per_row_group} docs/row group), wide {views['wide']} (4 docs/row group); "
        f"{time.perf_counter() - t_setup:.0f} s (untimed)",
        flush=True,
    )

    # 1. throughput per worker --------------------------------------------------------------------------------
    per_step = args.global_batch * args.seq_len
    print(
        f"\n## 1. tokens/s per worker ({args.steps} steps of {args.global_batch} x {args.seq_len} tokens, world 1, "
        f"median of {args.repeats})",
        flush=True,
    )
    rows: dict[str, list[dict]] = {
        k: []
        for k in (
            "memmap",
            "ours",
            "ours, no prefetch",
            "ours+prefetch4",
            "ours 2 workers",
            "ours 2 workers, start-up included",
            "ours, 4 docs/row group view",
        )
    }
    time_batches(memmap_batches(flat, args.global_batch, args.seq_len, 2), 2)  # warm imports
    worker_warmup: list[int] = []
    prod_plan = RunViewLoader(prod, args.global_batch, seq_len=args.seq_len).plan  # how the workers cut items
    for r in range(args.repeats):
        start = r * args.steps * args.global_batch
        rows["memmap"].append(
            time_batches(memmap_batches(flat, args.global_batch, args.seq_len, args.steps, start), args.steps)
        )
        # "ours": the loader as a trainer gets it (default read-ahead: prefetch 8, one thread), in process
        rows["ours"].append(loader_round(homes["prod"], views["prod"], args, prefetch=None, start_step=r * args.steps))
        rows["ours, no prefetch"].append(loader_round(homes["prod"], views["prod"], args, start_step=r * args.steps))
        rows["ours+prefetch4"].append(
            loader_round(homes["prod"], views["prod"], args, prefetch=4, start_step=r * args.steps)
        )
        # workers: steady after each worker's first item (their start-up: fork, epoch order, first row groups), over
        # whole items (a chunk is two block windows, ~116 steps here): `--worker-steps` steps
        first_items = worker_first_items(prod_plan, r * args.steps)
        worker_warmup.append(first_items)
        for name, warmup in (("ours 2 workers", first_items), ("ours 2 workers, start-up included", 1)):
            w = loader_round(
                homes["prod"],
                views["prod"],
                args,
                num_workers=2,
                prefetch=None,
                start_step=r * args.steps,
                warmup=warmup,
                steps=args.worker_steps,
            )
            rows[name].append(
                {**w, "tokens_per_s": w["tokens_per_s"] / 2, "steady_tokens_per_s": w["steady_tokens_per_s"] / 2}
            )
        rows["ours, 4 docs/row group view"].append(
            loader_round(homes["wide"], views["wide"], args, start_step=r * args.steps)
        )
    for name, rs in rows.items():
        if any(x["tokens"] != x.get("steps", args.steps) * per_step for x in rs):
            raise BenchFailure(f"{name} delivered {[x['tokens'] for x in rs]} tokens, expected {args.steps * per_step}")
    mosaic, mosaic_note = None, "skipped (--skip-mosaic)"
    if not args.skip_mosaic:
        python, mosaic_note = ensure_mosaic_venv(args.mosaic_venv)
        if python is not None:
            mosaic = mosaic_rounds(python, flat, work, args)
            rows["mosaic streaming"] = [{**x, "tokens_per_s": x["tokens"] / x["seconds"]} for x in mosaic["rounds"]]
            if any(x["tokens"] != args.steps * per_step for x in rows["mosaic streaming"]):
                raise BenchFailure(f"Mosaic delivered {[x['tokens'] for x in rows['mosaic streaming']]} tokens")
    key = "steady_tokens_per_s"
    base = med(rows["memmap"], key)
    mos = med(rows["mosaic streaming"], key) if "mosaic streaming" in rows else None
    print(
        "| reader | tokens/s per worker (after 1st batch) | ms/step | 1st batch ms | all steps tokens/s "
        "| vs memmap | vs Mosaic |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    print(f"load average (1 min) on this machine after section 1: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name, rs in rows.items():
        tps = med(rs, key)
        vs_mosaic = f"{tps / mos:.2f}x" if mos else "-"
        print(
            f"| {name} | {tps:,.0f} | {per_step / tps * 1000:.2f} | {med(rs, 'first_s') * 1000:.1f} | "
            f"{med(rs, 'tokens_per_s'):,.0f} | {tps / base:.4f}x | {vs_mosaic} |"
        )
    print(
        f"Mosaic: {mosaic_note}"
        + (f"; MDS write {mosaic['write_s']:.1f} s untimed, {mosaic['samples']} samples" if mosaic else "")
    )
    print(
        "ours = RunViewLoader as configured by default (prefetch 8: an adaptive batch read-ahead thread; every "
        "variant also reads its next stream segment on a thread while it packs), in process; "
        "ours 2 workers = aggregate tokens/s of DataLoader(num_workers=2) / 2 on this 2-core machine, after "
        f"each worker's first item (median {statistics.median(worker_warmup):.0f} steps: fork, epoch order, its "
        f"first block windows), over the next {args.worker_steps} steps (several items: a worker hands over two "
        "block windows at a time); 'start-up included': after the first batch only"
    )

    breakdown = cpu_breakdown(homes["prod"], views["prod"], args)
    print(
        f"\nwhere the CPU goes, in process without read-ahead ({args.steps - 1} steps after the first batch, thread "
        "CPU ns per token, each part exclusive of the others; memmap for the whole batch: "
        f"{med(rows['memmap'], 'steady_cpu_ns_per_token'):.1f})\n| part | ns/token |\n|---|---:|"
    )
    for part, ns in breakdown.items():
        print(f"| {part} | {ns:.1f} |")

    # 2. data-wait at 1M tokens/s/rank --------------------------------------------------------------------------
    spt = 1.0 / CONSUMER_TOKENS_PER_S
    world, gb = 8, args.global_batch * 8
    print(
        f"\n## 2. data-wait, rank 0 of world {world} (global batch {gb}: {per_step:,} tokens per rank-step), "
        f"consumer at {CONSUMER_TOKENS_PER_S:,} tokens/s",
        flush=True,
    )
    waits = {
        "memmap": time_batches(memmap_batches(flat, args.global_batch, args.seq_len, args.steps), args.steps, spt),
        "ours, no prefetch": loader_round(
            homes["prod"], views["prod"], args, world=world, global_batch=gb, consumer_s_per_token=spt
        ),
        "ours, default prefetch": loader_round(
            homes["prod"], views["prod"], args, prefetch=None, world=world, global_batch=gb, consumer_s_per_token=spt
        ),
        "ours, prefetch 2": loader_round(
            homes["prod"], views["prod"], args, prefetch=2, world=world, global_batch=gb, consumer_s_per_token=spt
        ),
    }
    print(
        "| reader | data-wait fraction | after 1st batch | 1st batch ms | delivered tokens/s | vs consumer rate |\n"
        "|---|---:|---:|---:|---:|---:|"
    )
    for name, w in waits.items():
        print(
            f"| {name} | {w['wait_fraction']:.3f} | {w['steady_wait_fraction']:.3f} | {w['first_s'] * 1000:.1f} | "
            f"{w['tokens_per_s']:,.0f} | {w['tokens_per_s'] / CONSUMER_TOKENS_PER_S:.3f} |"
        )

    # 3. time to first batch ---------------------------------------------------------------------------------------
    print(f"\n## 3. time to first batch, rank 7 of 8, fresh process (median of {args.repeats})", flush=True)
    cat = ttfb_rounds(homes["wide"], views["wide"], None, args)
    bun = ttfb_rounds(homes["wide"], views["wide"], bundle, args)
    warm = ttfb_rounds(homes["wide"], views["wide"], None, args, layout_cache=work / "layouts")
    if cat[0]["row_groups"] < args.min_row_groups:
        raise BenchFailure(
            f"the wide view has {cat[0]['row_groups']} row groups, fewer than {args.min_row_groups}; raise --docs"
        )
    floor = med(cat, "footers_s")
    print(f"view: {cat[0]['row_groups']:,} row groups in {cat[0]['files']} files, {cat[0]['samples']:,} samples")
    print(
        "| from | import s | open s | loader s | first batch s | total s | after import s | vs footers |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    for name, rs in (("catalog", cat), ("catalog, node layout cache", warm), ("bundle", bun)):
        after = med(rs, "after_import_s")
        print(
            f"| {name} | {med(rs, 'import_s'):.2f} | {med(rs, 'open_s'):.2f} | {med(rs, 'init_s'):.3f} | "
            f"{med(rs, 'first_batch_s'):.3f} | {med(rs, 'total_s'):.2f} | {after:.2f} | {after / floor:.1f}x |"
        )
    print(f"baseline: pyarrow reads the footers of the {cat[0]['files']} token files in {floor:.3f} s")
    print(f"of the import time, `import torch` alone: {med(cat, 'import_torch_s'):.2f} s (catalog, median)")
    heavy = sorted({m for r in cat for m in r["heavy_imports"]})
    print(f"imported by the first batch from the catalog among {', '.join(HEAVY_IMPORTS)}: {heavy or 'none'}")

    # 4. state_dict cost ----------------------------------------------------------------------------------------------
    from loader import RunViewLoader, make_state

    data = RunViewLoader(prod, args.global_batch, seq_len=args.seq_len)
    it = iter(data)
    next(it)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        state = data.state_dict()
    per_call = (time.perf_counter() - t0) / n
    it.close()
    size = len(json.dumps(state))
    resumed = RunViewLoader(prod, args.global_batch, seq_len=args.seq_len)
    t0 = time.perf_counter()
    resumed.load_state_dict(make_state(resumed.plan, 1_000_000))
    first = next(iter(resumed))
    resume_s = time.perf_counter() - t0
    if first["step"] != 1_000_000:
        raise BenchFailure(f"resume at step 1,000,000 served step {first['step']}")
    fresh = RunViewLoader(prod, args.global_batch, seq_len=args.seq_len)
    t0 = time.perf_counter()
    next(iter(fresh))
    fresh_s = time.perf_counter() - t0
    step_s = per_step / med(rows["ours"], "steady_tokens_per_s")
    RESULT.update(
        {
            "tokens_per_s": med(rows["ours"], key),
            "memmap_tokens_per_s": base,
            "ratio_vs_memmap": med(rows["ours"], key) / base,
            "cpu_ns_per_token": med(rows["ours"], "steady_cpu_ns_per_token"),
            "memmap_cpu_ns_per_token": med(rows["memmap"], "steady_cpu_ns_per_token"),
            "cpu_ratio_vs_memmap": med(rows["memmap"], "steady_cpu_ns_per_token")
            / med(rows["ours"], "steady_cpu_ns_per_token"),
            "load_average_1m": os.getloadavg()[0],
            "cpu_breakdown_ns_per_token": breakdown,
            "worker_tokens_per_s": med(rows["ours 2 workers"], key),
            "worker_ratio_vs_in_process": med(rows["ours 2 workers"], key) / med(rows["ours"], key),
            "worker_tokens_per_s_incl_startup": med(rows["ours 2 workers, start-up included"], key),
            "worker_warmup_steps": statistics.median(worker_warmup),
            "worker_steps": args.worker_steps,
            "prefetch4_tokens_per_s": med(rows["ours+prefetch4"], key),
            "tokens_per_s_no_prefetch": med(rows["ours, no prefetch"], key),
            "ratio_vs_memmap_no_prefetch": med(rows["ours, no prefetch"], key) / base,
            "data_wait_after_first_batch": waits["ours, default prefetch"]["steady_wait_fraction"],
            "data_wait": waits["ours, default prefetch"]["wait_fraction"],
            "memmap_data_wait": waits["memmap"]["steady_wait_fraction"],
            "first_batch_s": med(cat, "total_s"),
            "first_batch_after_import_s": med(cat, "after_import_s"),
            "first_batch_import_s": med(cat, "import_s"),
            "first_batch_import_torch_s": med(cat, "import_torch_s"),
            "first_batch_heavy_imports": sorted({m for r in cat for m in r["heavy_imports"]}),
            "first_batch_bundle_s": med(bun, "total_s"),
            "first_batch_layout_cached_s": med(warm, "total_s"),
            "first_batch_layout_cached_after_import_s": med(warm, "after_import_s"),
            "row_groups": cat[0]["row_groups"],
            "state_dict_us": per_call * 1e6,
            "load_state_dict_first_batch_ms": resume_s * 1000,
            "steps": args.steps,
            "repeats": args.repeats,
            "seq_len": args.seq_len,
            "global_batch": args.global_batch,
        }
    )
    print("\n## 4. state_dict()\n| | value |\n|---|---:|")
    print(f"| state_dict() per call | {per_call * 1e6:.1f} us ({size} bytes of JSON) |")
    print(f"| share of our step ({step_s * 1000:.1f} ms) | {per_call / step_s:.2e} |")
    print(
        f"| share of a 1M tokens/s step ({per_step / CONSUMER_TOKENS_PER_S * 1000:.1f} ms) | "
        f"{per_call / (per_step / CONSUMER_TOKENS_PER_S):.2e} |"
    )
    print(
        f"| load_state_dict + first batch at step 1,000,000 | {resume_s * 1000:.1f} ms "
        f"(first batch at step 0: {fresh_s * 1000:.1f} ms; ratio {resume_s / fresh_s:.2f}) |"
    )
    if args.json:
        print(json.dumps(RESULT, sort_keys=True), file=JSON_OUT, flush=True)
    return 0


RESULT: dict = {}
JSON_OUT = sys.stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=40_960, help="documents (x4 docs per row group >= 10,000 rgs)")
    p.add_argument("--docs-per-row-group", type=int, default=1024)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--worker-steps", type=int, default=4000, help="steps timed with DataLoader workers")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-mosaic", action="store_true")
    p.add_argument("--min-row-groups", type=int, default=MIN_ROW_GROUPS, help="fail below this (smoke runs: 0)")
    p.add_argument("--mosaic-venv", type=Path, default=MOSAIC_VENV)
    p.add_argument("--child", choices=["ttfb"], help=argparse.SUPPRESS)
    p.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--run-view", help=argparse.SUPPRESS)
    p.add_argument("--bundle", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (tables go to stderr)")
    args = p.parse_args(argv)
    if args.json and args.child is None:
        global JSON_OUT
        JSON_OUT, sys.stdout = sys.stdout, sys.stderr
    if args.child == "ttfb":
        child_ttfb(args)
        return 0
    return run_reported("loader", lambda work: run_bench(work, args), missing_input_exit=2)


if __name__ == "__main__":
    sys.exit(main())
