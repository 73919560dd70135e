"""`make demo`: run the pipeline on the sample crawl through the same Definitions the UI uses.

The sensor discovers the crawl segments and adds them as dynamic partitions; each requested partition is
then ingested (raw) and curated in-process on the local instance (no server), after the reference LM and
the language-ID validation are built; exact dedup runs last over every partition. Re-running replaces
each partition; nothing is duplicated.
"""

from __future__ import annotations

import sys
from collections import Counter

import dagster as dg

from iceberg_catalog import tokenlake_home
from assets.quarantine.benchmarks import DEFAULT_SOURCES
from orchestration.instance import prepare_dagster_home

DEMO_TOKENIZER = "gpt2"


def run_sensor_and_ingest(defs: dg.Definitions, instance: dg.DagsterInstance) -> list[str]:
    """One sensor tick (as the daemon would run it), then every requested partition in-process."""
    from orchestration.sensors import new_crawl_segments

    with dg.build_sensor_context(instance=instance, resources={"crawl_source": defs.resources["crawl_source"]}) as ctx:
        result = new_crawl_segments(ctx)
    if isinstance(result, dg.SkipReason):
        return []
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    keys = [r.partition_key for r in result.run_requests or []]
    for key in keys:
        run_job(defs, instance, "raw_ingest", key)
    return keys


def run_job(defs: dg.Definitions, instance: dg.DagsterInstance, name: str, partition_key=None,
            run_config=None) -> dg.ExecuteInProcessResult:
    """Execute one job in-process on the instance (the run shows up in the UI's run history)."""
    print(f"running {name}" + (f" for {partition_key}" if partition_key else "") + " ...", flush=True)
    res = defs.resolve_job_def(name).execute_in_process(instance=instance, partition_key=partition_key,
                                                        run_config=run_config, tags={"tokenlake/source": "make demo"},
                                                        raise_on_error=False)
    if not res.success:
        raise SystemExit(f"{name} {partition_key or ''} failed; see run {res.run_id} in the Dagster UI")
    return res


def report(catalog) -> None:
    """Records per crawl/segment, rejects per reason, snapshot ids: what the demo prints."""
    rows = catalog.load_table("raw.warc_records").scan(selected_fields=("crawl", "segment", "payload_length")).to_arrow()
    per_seg = Counter(zip(rows["crawl"].to_pylist(), rows["segment"].to_pylist()))
    print("\nraw.warc_records: response records per crawl/segment")
    for (crawl, seg), n in sorted(per_seg.items()):
        print(f"  {crawl}/{seg:<24} {n:>6}")
    print(f"  {'total':<40} {rows.num_rows:>6}")
    rej = catalog.load_table("raw.rejected_records").scan(selected_fields=("reason",)).to_arrow()
    print("\nraw.rejected_records: rejects per reason")
    for reason, n in sorted(Counter(rej["reason"].to_pylist()).items()) or [("(none)", 0)]:
        print(f"  {reason:<40} {n:>6}")
    print("\nIceberg snapshots (current)")
    for ident in ("raw.warc_records", "raw.rejected_records"):
        t = catalog.load_table(ident)
        snap = t.current_snapshot()
        print(f"  {ident:<28} snapshot {snap.snapshot_id if snap else None}  ({len(t.snapshots())} in history)")


def report_curated(catalog) -> None:
    """The funnel: documents per decision, then exact duplicates, then what is kept."""
    from assets.curated.pipeline import funnel

    docs = catalog.load_table("curated.documents").scan(selected_fields=("decision", "kept", "language")).to_arrow()
    exact = set(catalog.load_table("curated.exact_duplicates").scan(selected_fields=("doc_id",)).to_arrow()["doc_id"]
                .to_pylist())
    near = catalog.load_table("curated.near_duplicates").scan(selected_fields=("doc_id", "decision")).to_arrow()
    near_dups = {d for d, dec in zip(near["doc_id"].to_pylist(), near["decision"].to_pylist()) if dec}
    print(f"\ncurated.documents: {docs.num_rows} HTML documents; funnel (first failing rule)")
    rows = funnel(docs["decision"].to_pylist())
    kept = rows.pop()[1]
    only_near = near_dups - exact
    for decision, n in rows + [("exact_duplicate", len(exact)), ("near_duplicate", len(only_near)),
                               ("kept", kept - len(exact) - len(only_near))]:
        print(f"  {decision:<40} {n:>6}")
    langs = Counter(lang for lang, k in zip(docs["language"].to_pylist(), docs["kept"].to_pylist()) if k)
    print("  kept by language: " + ", ".join(f"{lang} {n}" for lang, n in langs.most_common()))
    for ident in ("curated.documents", "curated.exact_duplicates", "curated.langid_validation",
                  "curated.minhash_bands", "curated.near_duplicates"):
        snap = catalog.load_table(ident).current_snapshot()
        print(f"  {ident:<28} snapshot {snap.snapshot_id if snap else None}")


def report_tokenized(catalog) -> None:
    t = catalog.load_table("tokenized.documents").scan(selected_fields=("tokenizer_id", "crawl", "n_tokens")).to_arrow()
    names = {r["tokenizer_id"]: r["name"] for r in
             catalog.load_table("tokenized.tokenizers").scan(selected_fields=("tokenizer_id", "name")).to_arrow().to_pylist()}
    print("\ntokenized.documents: documents and tokens per tokenizer and crawl")
    totals: Counter = Counter()
    docs: Counter = Counter()
    for tid, crawl, n in zip(t["tokenizer_id"].to_pylist(), t["crawl"].to_pylist(), t["n_tokens"].to_pylist()):
        totals[(names.get(tid, tid[:12]), crawl)] += n
        docs[(names.get(tid, tid[:12]), crawl)] += 1
    for (name, crawl), n in sorted(totals.items()):
        print(f"  {name:<12} {crawl:<20} {docs[(name, crawl)]:>5} documents {n:>9,} tokens")
    snap = catalog.load_table("tokenized.documents").current_snapshot()
    print(f"  tokenized.documents          snapshot {snap.snapshot_id if snap else None}")


def report_quarantine(catalog) -> None:
    items = catalog.load_table("quarantine.eval_items").scan(selected_fields=("benchmark",)).to_arrow()
    found = catalog.load_table("quarantine.matches").scan(selected_fields=("benchmark", "doc_id")).to_arrow()
    per_bench = Counter(items["benchmark"].to_pylist())
    docs = {}
    for b, d in zip(found["benchmark"].to_pylist(), found["doc_id"].to_pylist()):
        docs.setdefault(b, set()).add(d)
    print("\nquarantine: eval items per benchmark, kept documents that contain one")
    for b, n in sorted(per_bench.items()):
        print(f"  {b:<14} {n:>6} items   {len(docs.get(b, ())):>4} contaminated documents")


# The demo's run view: a token-weighted mixture of perplexity buckets (the sample crawl keeps only a few
# dozen English documents, so the mixture is small; the shape is what a real run view config looks like).
DEMO_RUN_VIEW = {"ops": {"run_view__candidate": {"config": {
    "name": "demo",
    "tokenizer": DEMO_TOKENIZER,
    "components": [
        {"name": "head_middle", "weight": 0.7, "filters": {"ppl_bucket": ["head", "middle"]}, "max_repetitions": 1},
        {"name": "tail", "weight": 0.3, "filters": {"ppl_bucket": ["tail"]}, "max_repetitions": 2},
    ],
    "seed": 1234,
    "seq_len": 2048,
    "cross_document_attention": "masked",
}}}}


def report_run_view(catalog, result: dg.ExecuteInProcessResult, checks: dict[str, bool]) -> None:
    """The candidate: mixture requested vs realised, its checks, and how to approve it."""
    from assets.run_view.store import load_manifest

    mat = result.asset_materializations_for_node("run_view__candidate")[0]
    rv_id, sha = mat.metadata["run_view_id"].value, mat.metadata["manifest_sha256"].value
    row = load_manifest(catalog, rv_id)
    m = row["manifest"]
    print(f"\nrun view candidate {rv_id} ({row['status']}): {m['samples']['n_samples']} samples of "
          f"{m['samples']['n_documents']} documents, {m['samples']['n_tokens']:,} tokens")
    print(f"  {'component':<14} {'requested':>10} {'realised':>10} {'doc share':>10} {'tokens':>9}")
    for r in m["realised"]:
        print(f"  {r['component']:<14} {r['requested_share']:>10.1%} {r['token_share']:>10.1%} "
              f"{r['document_share']:>10.1%} {r['tokens']:>9,}")
    print("  excluded: " + ", ".join(f"{k} {v}" for k, v in m["exclusions"].items()))
    print("  checks: " + ", ".join(f"{k} {'passed' if v else 'FAILED'}" for k, v in sorted(checks.items())))
    print(f"  manifest_sha256 {sha}")
    print("\nTo publish it, a reviewer either launches the job publish_run_view in the Dagster UI (Launchpad) with")
    print(f"    ops: {{decide_run_view: {{config: {{run_view_id: {rv_id}, manifest_sha256: {sha},")
    print("                                  reviewer: <your name>, decision: approve, comment: ''}}}")
    print("or runs")
    print(f"    .venv/bin/tokenlake runview approve {rv_id} --sha256 {sha} --reviewer <your name>")


def main() -> int:
    home = tokenlake_home()
    dagster_home = prepare_dagster_home()
    from orchestration.definitions import defs  # after DAGSTER_HOME is set

    print(f"TOKENLAKE_HOME={home}\nDAGSTER_HOME={dagster_home}")
    with dg.DagsterInstance.get() as instance:
        run_sensor_and_ingest(defs, instance)
        keys = sorted(instance.get_dynamic_partitions("crawl_segments"))
        run_job(defs, instance, "curate_models")
        for key in keys:
            run_job(defs, instance, "curate", key)
            run_job(defs, instance, "minhash", key)
        run_job(defs, instance, "exact_dedup")
        run_job(defs, instance, "near_dedup")
        instance.add_dynamic_partitions("tokenizers", [DEMO_TOKENIZER])
        run_job(defs, instance, "register_tokenizer", DEMO_TOKENIZER)
        for key in keys:
            run_job(defs, instance, "tokenize", dg.MultiPartitionKey({"tokenizer": DEMO_TOKENIZER, "segment": key}))
        names = [s.name for s in DEFAULT_SOURCES]
        instance.add_dynamic_partitions("benchmarks", names)
        for name in names:
            run_job(defs, instance, "register_benchmark", name)
            for key in keys:
                run_job(defs, instance, "decontaminate", dg.MultiPartitionKey({"benchmark": name, "segment": key}))
        candidate = run_job(defs, instance, "run_view_candidate", run_config=DEMO_RUN_VIEW)
        checks = {e.check_name: e.passed for e in candidate.get_asset_check_evaluations()}
        print(f"\n{len(keys)} partitions materialised: {', '.join(keys)}")
    catalog = defs.resources["catalog"].catalog()
    report(catalog)
    report_curated(catalog)
    report_tokenized(catalog)
    report_quarantine(catalog)
    report_run_view(catalog, candidate, checks)
    print("\nBrowse it: DAGSTER_HOME=" + str(dagster_home) + " .venv/bin/dagster dev -w workspace.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
