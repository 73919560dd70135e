"""`make demo`: the whole pipeline on the sample crawl, step by step in the order `orchestration.flow.STEPS`
declares, in-process through the same Definitions the UI uses (no server). The sensor discovers the crawl
segments and adds them as dynamic partitions; every other step runs its job once or per partition. Re-running
replaces each partition; nothing is duplicated. The approval gate is left to a reviewer: the demo prints how.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from pathlib import Path

import dagster as dg
from pyiceberg.expressions import In

from assets.quarantine import registry
from assets.quarantine.benchmarks import DEFAULT_SOURCES
from iceberg_catalog import Lakehouse, tokenlake_home
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    CURATED_LANGID_VALIDATION,
    DEDUP_MINHASH_BANDS,
    DEDUP_NEAR_DUPLICATES,
    QUARANTINE_EVAL_ITEMS,
    QUARANTINE_MATCHES,
    RAW_REJECTED_RECORDS,
    RAW_WARC_RECORDS,
    TOKENIZED_DOCUMENTS,
    TOKENIZED_TOKENIZERS,
)
from orchestration.flow import STEPS, Step
from orchestration.instance import execute_job, failure_report, prepare_dagster_home
from orchestration.progress import MeteredExecutorResource, RunMeter, native_stderr_captured

DEMO_TOKENIZER = "gpt2"
# A canary benchmark: three sentences of a page in the sample crawl (https://commoncrawl.org/faq), so the demo
# shows a contaminated document being found and kept out of the run view (data/README.md says why it exists).
CANARY_NAME = "canary"
CANARY_FILE = Path(__file__).resolve().parent.parent / "data" / "benchmarks" / "canary.jsonl"
CANARY_FIELDS = ("question", "answer")
VERBOSE = "--verbose" in sys.argv[1:]  # Dagster's own DEBUG events on the console too


def discover_segments(defs: dg.Definitions, instance: dg.DagsterInstance) -> list[str]:
    """One tick of the `new_crawl_segments` sensor (as the daemon would run it): the segments it requests."""
    sensor = defs.resolve_sensor_def("new_crawl_segments")
    with dg.build_sensor_context(
        instance=instance, resources={"crawl_source": defs.resources["crawl_source"]}, cursor=None
    ) as ctx:
        result = sensor(ctx)
    if isinstance(result, dg.SkipReason):
        return []
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return [r.partition_key for r in result.run_requests or []]


def run_job(
    defs: dg.Definitions, instance: dg.DagsterInstance, name: str, partition_key=None, run_config=None
) -> dg.ExecuteInProcessResult:
    """Execute one job in-process on the instance (the run shows up in the UI's run history). One line per
    run: a progress bar of what its tasks produce while it runs (a TTY only), then the count, rate and time;
    Dagster's own events only with `--verbose` (they are in the run's log in the UI either way)."""
    label = f"{name}" + (f" {partition_key}" if partition_key else "")
    metered = {"executor": MeteredExecutorResource.like(defs.resources["executor"])}
    with RunMeter(label, name) as meter, native_stderr_captured(not VERBOSE) as stderr:
        res = execute_job(
            defs, instance, name, "make demo", partition_key, run_config, quiet=not VERBOSE, resources=metered
        )
        stderr.failed = not res.success
    meter.close(res.success, rows=materialised_rows(res))
    if not res.success:
        raise SystemExit(f"{label} failed: {failure_report(res)}")
    return res


def materialised_rows(res: dg.ExecuteInProcessResult) -> int | None:
    """Rows the run's materialisations report (`dagster/row_count`), for a run without executor tasks."""
    counts = [
        e.materialization.metadata["dagster/row_count"].value
        for e in res.get_asset_materialization_events()
        if "dagster/row_count" in e.materialization.metadata
    ]
    return sum(counts) if counts else None


def register_canary(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    """Register the demo's canary benchmark as `tokenlake benchmark add` would (not again when the same bytes
    are registered already, so a resumed run finds nothing changed)."""
    lakehouse = defs.resources["catalog"].lakehouse()
    current = registry.registered(lakehouse, CANARY_NAME)
    if current is None or current.sha256 != hashlib.sha256(CANARY_FILE.read_bytes()).hexdigest():
        registry.register(lakehouse, CANARY_NAME, CANARY_FILE, "jsonl", CANARY_FIELDS)
    instance.add_dynamic_partitions("benchmarks", [CANARY_NAME])


def partition_keys(step: Step, instance: dg.DagsterInstance, segments: list[str]) -> list:
    """What one run of `step` covers, for every run the demo makes of it (adding tokenizer and benchmark
    partitions first; benchmarks added by command are covered too)."""
    shipped = [s.name for s in DEFAULT_SOURCES]
    if step.per == "tokenizer" or step.per == "tokenizer x segment":
        instance.add_dynamic_partitions("tokenizers", [DEMO_TOKENIZER])
    if step.per.startswith("benchmark"):
        instance.add_dynamic_partitions("benchmarks", shipped)
    # the shipped benchmarks and any added with `tokenlake benchmark add` (screened on new segments too)
    benchmarks = sorted(set(shipped) | set(instance.get_dynamic_partitions("benchmarks")))
    return {
        "all": [None],
        "segment": segments,
        "tokenizer": [DEMO_TOKENIZER],
        "benchmark": benchmarks,
        "tokenizer x segment": [dg.MultiPartitionKey({"tokenizer": DEMO_TOKENIZER, "segment": k}) for k in segments],
        "benchmark x segment": [
            dg.MultiPartitionKey({"benchmark": b, "segment": k}) for b in benchmarks for k in segments
        ],
    }[step.per]


def done_before(defs: dg.Definitions, instance: dg.DagsterInstance, job: str, partition_key) -> bool:
    """Every asset of `job` has a materialisation of this partition made by its current code version."""
    graph = defs.resolve_asset_graph()
    partitions = [str(partition_key)] if partition_key is not None else None
    for key in defs.resolve_job_def(job).asset_layer.selected_asset_keys:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=partitions), limit=1
        ).records
        if (
            not records
            or records[0].asset_materialization.tags.get("dagster/code_version") != graph.get(key).code_version
        ):
            return False
    return True


def has_upstream(defs: dg.Definitions, job: str) -> bool:
    """Whether the job's assets read assets of other jobs (a source step, e.g. the models, does not; an asset
    reading another of the same job, e.g. the domain model's validation, does not count)."""
    graph = defs.resolve_asset_graph()
    keys = defs.resolve_job_def(job).asset_layer.selected_asset_keys
    return any(parent not in keys for k in keys for parent in graph.get(k).parent_keys)


def key_parts(partition_key) -> set[str]:
    """The dimension values of a partition key (a segment, a tokenizer, a benchmark), for change tracking."""
    if partition_key is None:
        return set()
    if isinstance(partition_key, dg.MultiPartitionKey):
        return set(partition_key.keys_by_dimension.values())
    return {str(partition_key)}


class Progress:
    """What a resumable run did: runs made and skipped, and which partition values changed (their
    downstream partitions must run again; once an all-partition step runs, every later step runs)."""

    def __init__(self, resume: bool) -> None:
        self.resume, self.changed, self.everything, self.ran, self.skipped = resume, set(), False, 0, 0

    def must_run(self, defs, instance, step: Step, key) -> bool:
        if not self.resume or self.everything or not done_before(defs, instance, step.job, key):
            return True
        if step.per == "all":
            return bool(self.changed) and has_upstream(defs, step.job)
        return bool(key_parts(key) & self.changed)

    def record(self, step: Step, key) -> None:
        self.ran += 1
        self.changed |= key_parts(key)
        self.everything = self.everything or (step.per == "all" and step.job != "run_view_candidate")


def run_pipeline(
    defs: dg.Definitions, instance: dg.DagsterInstance, resume: bool = False
) -> tuple[list[str], Progress]:
    """Every step of STEPS but the reviewer's, on every discovered segment. `resume`: skip a partition whose
    assets were already materialised by the current code, unless something upstream of it changed in this run."""
    progress, segments = Progress(resume), []
    for number, step in enumerate(STEPS, 1):
        if step.reviewer:
            continue
        print(f"[{number}/{len(STEPS)}] {step.job}: {step.what}", flush=True)
        if step.job == "raw_ingest":
            with native_stderr_captured(not VERBOSE):
                requested = discover_segments(defs, instance)
            segments = sorted(instance.get_dynamic_partitions("crawl_segments"))
            print(f"  sensor new_crawl_segments: {len(segments)} segments, {len(requested)} new", flush=True)
        if step.per == "benchmark":
            register_canary(defs, instance)
        config = DEMO_RUN_VIEW if step.job == "run_view_candidate" else None
        for key in partition_keys(step, instance, segments):
            if progress.must_run(defs, instance, step, key):
                run_job(defs, instance, step.job, key, config)
                progress.record(step, key)
            else:
                progress.skipped += 1
                print(f"  {step.job + (f' {key}' if key is not None else ''):<62} skipped (done, unchanged)")
    return segments, progress


def latest_candidate(instance: dg.DagsterInstance) -> tuple[str, str, dict]:
    """The run view the latest `run_view/candidate` materialisation wrote, its manifest hash and its checks."""
    from assets.run_view.defs import CANDIDATE, check_results_for

    event = instance.get_latest_materialization_event(CANDIDATE)
    meta = event.asset_materialization.metadata
    rv_id, sha = meta["run_view_id"].value, meta["manifest_sha256"].value
    return rv_id, sha, check_results_for(instance, rv_id)


def snapshot_lines(lakehouse: Lakehouse, *tables) -> None:
    for t in tables:
        table = lakehouse.table(t)
        snap = table.current_snapshot()
        print(
            f"  {t.identifier:<28} snapshot {snap.snapshot_id if snap else None}  ({len(table.snapshots())} in history)"
        )


def report_raw(lakehouse: Lakehouse) -> None:
    """Records per crawl/segment, rejects per reason, snapshot ids."""
    rows = lakehouse.scan(RAW_WARC_RECORDS, ("crawl", "segment"))
    per_seg = Counter(zip(rows["crawl"].to_pylist(), rows["segment"].to_pylist()))
    print(f"\n{RAW_WARC_RECORDS}: response records per crawl/segment")
    for (crawl, seg), n in sorted(per_seg.items()):
        print(f"  {crawl}/{seg:<24} {n:>6}")
    print(f"  {'total':<40} {rows.num_rows:>6}")
    rej = lakehouse.scan(RAW_REJECTED_RECORDS, ("reason",))
    print(f"\n{RAW_REJECTED_RECORDS}: rejects per reason")
    for reason, n in sorted(Counter(rej["reason"].to_pylist()).items()) or [("(none)", 0)]:
        print(f"  {reason:<40} {n:>6}")
    print("\nIceberg snapshots (current)")
    snapshot_lines(lakehouse, RAW_WARC_RECORDS, RAW_REJECTED_RECORDS)


def report_curated(lakehouse: Lakehouse) -> None:
    """The funnel: documents per decision, then exact and near duplicates, then what is kept."""
    from assets.curated.pipeline import funnel

    docs = lakehouse.scan(CURATED_DOCUMENTS, ("decision", "kept", "language"))
    exact = set(lakehouse.scan(CURATED_EXACT_DUPLICATES, ("doc_id",))["doc_id"].to_pylist())
    near = lakehouse.scan(DEDUP_NEAR_DUPLICATES, ("doc_id", "decision"))
    near_dups = {d for d, dec in zip(near["doc_id"].to_pylist(), near["decision"].to_pylist()) if dec}
    print(f"\n{CURATED_DOCUMENTS}: {docs.num_rows} HTML documents; funnel (first failing rule)")
    rows = funnel(docs["decision"].to_pylist())
    kept = rows.pop()[1]
    only_near = near_dups - exact
    for decision, n in rows + [
        ("exact_duplicate", len(exact)),
        ("near_duplicate", len(only_near)),
        ("kept", kept - len(exact) - len(only_near)),
    ]:
        print(f"  {decision:<40} {n:>6}")
    langs = Counter(lang for lang, k in zip(docs["language"].to_pylist(), docs["kept"].to_pylist()) if k)
    print("  kept by language: " + ", ".join(f"{lang} {n}" for lang, n in langs.most_common()))
    report_clusters(lakehouse, exact)
    snapshot_lines(
        lakehouse,
        CURATED_DOCUMENTS,
        CURATED_EXACT_DUPLICATES,
        CURATED_LANGID_VALIDATION,
        DEDUP_MINHASH_BANDS,
        DEDUP_NEAR_DUPLICATES,
    )


def doc_urls(lakehouse: Lakehouse, doc_ids) -> dict[str, str]:
    """doc_id -> url of some curated documents."""
    rows = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", "url"), In("doc_id", sorted(doc_ids))) if doc_ids else None
    return dict(zip(rows["doc_id"].to_pylist(), rows["url"].to_pylist())) if rows is not None else {}


def report_clusters(lakehouse: Lakehouse, exact: set[str]) -> None:
    """Near-duplicate clusters of more than one document, and an example whose members are not exact copies
    (the canonical document first)."""
    members: dict[str, list[str]] = {}
    for r in lakehouse.scan(DEDUP_NEAR_DUPLICATES, ("doc_id", "cluster_id", "cluster_size")).to_pylist():
        if r["cluster_size"] > 1:
            members.setdefault(r["cluster_id"], []).append(r["doc_id"])
    copies = sum(1 for cid, ds in members.items() if all(d == cid or d in exact for d in ds))
    print(
        f"  near-duplicate clusters: {len(members)} ({sum(map(len, members.values()))} documents; "
        f"{copies} of exact copies only, counted above as exact duplicates)"
    )
    near = sorted(cid for cid, ds in members.items() if any(d != cid and d not in exact for d in ds))
    if near:
        ids = sorted(members[near[0]], key=lambda d: (d != near[0], d))
        urls = doc_urls(lakehouse, ids)
        print("  e.g. " + "  ~  ".join(urls.get(d, d) for d in ids))


def report_tokenized(lakehouse: Lakehouse) -> None:
    """Documents and tokens per tokenizer and crawl."""
    t = lakehouse.scan(TOKENIZED_DOCUMENTS, ("tokenizer_id", "crawl", "n_tokens"))
    names = {
        r["tokenizer_id"]: r["name"] for r in lakehouse.scan(TOKENIZED_TOKENIZERS, ("tokenizer_id", "name")).to_pylist()
    }
    print(f"\n{TOKENIZED_DOCUMENTS}: documents and tokens per tokenizer and crawl")
    totals: Counter = Counter()
    docs: Counter = Counter()
    for tid, crawl, n in zip(t["tokenizer_id"].to_pylist(), t["crawl"].to_pylist(), t["n_tokens"].to_pylist()):
        totals[(names.get(tid, tid[:12]), crawl)] += n
        docs[(names.get(tid, tid[:12]), crawl)] += 1
    for (name, crawl), n in sorted(totals.items()):
        print(f"  {name:<12} {crawl:<20} {docs[(name, crawl)]:>5} documents {n:>9,} tokens")
    snapshot_lines(lakehouse, TOKENIZED_DOCUMENTS)


def report_quarantine(lakehouse: Lakehouse) -> None:
    """Eval items per benchmark, and the kept documents that contain one."""
    per_bench = Counter(lakehouse.scan(QUARANTINE_EVAL_ITEMS, ("benchmark",))["benchmark"].to_pylist())
    found = lakehouse.scan(QUARANTINE_MATCHES, ("benchmark", "doc_id"))
    docs: dict[str, set] = {}
    for b, d in zip(found["benchmark"].to_pylist(), found["doc_id"].to_pylist()):
        docs.setdefault(b, set()).add(d)
    print("\nquarantine: eval items per benchmark, kept documents that contain one")
    for b, n in sorted(per_bench.items()):
        print(f"  {b:<14} {n:>6} items   {len(docs.get(b, ())):>4} contaminated documents")
    contaminated = set().union(*docs.values()) if docs else set()
    print(f"  {'any':<14} {'':>6}         {len(contaminated):>4} contaminated documents (kept out of run views)")
    if contaminated:
        example = min(contaminated)
        benchmarks = sorted(b for b, ds in docs.items() if example in ds)
        print(
            f"  e.g. {doc_urls(lakehouse, [example]).get(example, example)} contains items of {', '.join(benchmarks)}"
        )


# The demo's run view: a token-weighted mixture of perplexity buckets (the sample crawl keeps only a few
# dozen English documents, so the mixture is small; the shape is what a real run view config looks like).
# English only: the perplexity buckets come from an English reference LM; other languages are kept by the
# funnel (per-language rules) and would enter a view through a component of their own.
DEMO_RUN_VIEW = {
    "ops": {
        "run_view__candidate": {
            "config": {
                "name": "demo",
                "tokenizer": DEMO_TOKENIZER,
                "components": [
                    {
                        "name": "head_middle",
                        "weight": 0.7,
                        "filters": {"language": ["en"], "ppl_bucket": ["head", "middle"]},
                        "max_repetitions": 1,
                    },
                    {
                        "name": "tail",
                        "weight": 0.3,
                        "filters": {"language": ["en"], "ppl_bucket": ["tail"]},
                        "max_repetitions": 2,
                    },
                ],
                "seed": 1234,
                "seq_len": 2048,
                "cross_document_attention": "masked",
            }
        }
    }
}


def report_run_view(lakehouse: Lakehouse, rv_id: str, sha: str, checks: dict[str, bool | None]) -> None:
    """The candidate: mixture requested vs realised, its checks, and how to approve it."""
    from assets.run_view.store import load_manifest

    row = load_manifest(lakehouse, rv_id)
    m = row["manifest"]
    print(
        f"\nrun view candidate {rv_id} ({row['status']}): {m['samples']['n_samples']} samples of "
        f"{m['samples']['n_documents']} documents, {m['samples']['n_tokens']:,} tokens"
    )
    print(f"  {'component':<14} {'requested':>10} {'realised':>10} {'doc share':>10} {'tokens':>9}")
    for r in m["realised"]:
        print(
            f"  {r['component']:<14} {r['requested_share']:>10.1%} {r['token_share']:>10.1%} "
            f"{r['document_share']:>10.1%} {r['tokens']:>9,}"
        )
    print("  excluded: " + ", ".join(f"{k} {v}" for k, v in m["exclusions"].items()))
    verdict = {True: "passed", False: "FAILED", None: "not run"}
    print("  checks: " + ", ".join(f"{k} {verdict[v]}" for k, v in sorted(checks.items())))
    print(f"  samples digest  {m['samples']['sha256']}  (equal for equal inputs and config, on any executor)")
    print(f"  manifest_sha256 {sha}")
    print("\nTo publish it, a reviewer either launches the job publish_run_view in the Dagster UI (Launchpad) with")
    print(f"    ops: {{decide_run_view: {{config: {{run_view_id: {rv_id}, manifest_sha256: {sha},")
    print("                                  reviewer: <your name>, decision: approve, comment: ''}}}")
    print("or runs")
    print(f"    .venv/bin/tokenlake runview approve {rv_id} --sha256 {sha} --reviewer <your name>")


def run_and_report(resume: bool = False, crawl_root: str | None = None) -> int:
    """Run the pipeline on `crawl_root` (default `TOKENLAKE_CRAWL_ROOT`, else the sample crawl) through the
    local Dagster instance, then print the report."""
    home = tokenlake_home()
    dagster_home = prepare_dagster_home()
    from orchestration.definitions import build_defs  # after DAGSTER_HOME is set

    defs = build_defs(crawl_root)

    print(f"TOKENLAKE_HOME={home}\nDAGSTER_HOME={dagster_home}")
    with dg.DagsterInstance.get() as instance:
        segments, progress = run_pipeline(defs, instance, resume=resume)
        rv_id, sha, checks = latest_candidate(instance)
    print(f"\n{len(segments)} partitions: {', '.join(segments)}; {progress.ran} runs, {progress.skipped} skipped")
    lakehouse = defs.resources["catalog"].lakehouse()
    report_raw(lakehouse)
    report_curated(lakehouse)
    report_tokenized(lakehouse)
    report_quarantine(lakehouse)
    report_run_view(lakehouse, rv_id, sha, checks)
    print("\nBrowse it: DAGSTER_HOME=" + str(dagster_home) + " .venv/bin/dagster dev -w workspace.yaml")
    return 0


def main() -> int:
    """`make demo`: the whole pipeline on the sample crawl, every partition materialised again."""
    return run_and_report(resume=False)


if __name__ == "__main__":
    sys.exit(main())
