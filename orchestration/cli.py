"""`tokenlake`: look at the lakehouse from a terminal.

tokenlake tables                      every table: rows, data files, current snapshot
tokenlake snapshots TABLE [-n 10]     a table's snapshot history with its provenance properties
tokenlake digest [--json]             every table's row count and content digest, the run views' samples
                                      digests (equal digests: the same rows, whatever built them)
tokenlake [--verbose] COMMAND ...     --verbose: Dagster's own events too (a refusal's step failure and traceback)
tokenlake demo                        the `make demo` pipeline on the sample crawl
tokenlake run --crawl-root DIR [--force]
                                      the same steps on your crawl directory (Common Crawl's layout:
                                      DIR/crawl-data/<CRAWL>/segments/<SEGMENT>/warc/*.warc.gz; default
                                      TOKENLAKE_CRAWL_ROOT); resumable: partitions already materialised by the
                                      current code, with nothing upstream changed, are skipped unless --force
tokenlake runview list                every run view: id, status, samples, tokens, reviewer
tokenlake runview show ID             one run view's manifest (mixture requested vs realised, inputs, ...)
tokenlake runview approve|reject ID --sha256 HASH --reviewer NAME [--comment TEXT]
                                      launch the publish_run_view job (the same gate as the UI Launchpad)
tokenlake delete KEY_TYPE VALUE --reason TEXT --requested-by NAME [--now]
                                      record a deletion request (url | domain | deletion_key | record_id |
                                      doc_id); the deletion_requests sensor propagates it, or --now here
tokenlake deletions [REQUEST_ID]      deletion requests, or one request's deletion report
tokenlake log RUN_ID                  a run's event log (what a command that launched it left out without --verbose)
tokenlake provenance (--doc-id ID | --url URL) [--global-batch-size G] [--epochs N]
                                      WARC record -> curated decisions -> tokens -> run views and steps
tokenlake capacity --run-view ID --step-time S --world-size N [--headroom 0.7]
                                      storage demand of a training run next to a short soak's rate
tokenlake propose threshold|mixture|deletion ... --by WHO
tokenlake proposals list|show|approve|reject|apply|rollback|verify
                                      policy changes as reviewed proposals (orchestration/propose.py)
tokenlake benchmark add NAME FILE --format jsonl|csv|parquet --text-fields a,b [--split S]
tokenlake benchmark list              a benchmark from a file: copied in, screened against every curated
                                      segment, contaminated documents reported (orchestration/benchmark_cli.py)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime

from assets.governance.requests import KEY_TYPES
from iceberg_catalog import TABLES, Lakehouse, Provenance
from orchestration.instance import prepare_dagster_home, run_local_job, run_log


def cmd_tables(_args) -> int:
    lakehouse = Lakehouse()
    print(f"{'table':<30} {'rows':>10} {'files':>6}  snapshot")
    for ident, t in TABLES.items():
        snap = lakehouse.table(t).current_snapshot()
        summary = snap.summary.additional_properties if snap else {}
        print(
            f"{ident:<30} {summary.get('total-records', '0'):>10} {summary.get('total-data-files', '0'):>6}  "
            f"{snap.snapshot_id if snap else '-'}"
        )
    return 0


def cmd_snapshots(args) -> int:
    if args.table not in TABLES:
        print(f"unknown table {args.table!r}; tables: {', '.join(TABLES)}", file=sys.stderr)
        return 2
    table = Lakehouse().table(TABLES[args.table])
    snaps = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)[: args.n]
    for snap in snaps:
        when = datetime.fromtimestamp(snap.timestamp_ms / 1000, UTC).isoformat(timespec="seconds")
        props = Provenance.from_snapshot_summary(snap.summary.additional_properties)
        print(
            f"{snap.snapshot_id}  {when}  {snap.summary.operation.value:<9} "
            f"records {snap.summary.additional_properties.get('total-records', '?')}"
        )
        print("    " + json.dumps(props, sort_keys=True))
    return 0


def cmd_digest(args) -> int:
    from iceberg_catalog.digest import lakehouse_digest

    digest = lakehouse_digest(Lakehouse())
    if args.json:
        print(json.dumps(digest, sort_keys=True, separators=(",", ":")))
        return 0
    print(f"{'table':<30} {'rows':>10}  sha256")
    for ident in sorted(TABLES):
        print(f"{ident:<30} {digest[ident]['rows']:>10}  {digest[ident]['sha256']}")
    samples = [sha for key, shas in sorted(digest.items()) if key not in TABLES for sha in shas]
    print("\nrun view samples digests")
    for sha in samples or ["(no run view)"]:
        print(f"  {sha}")
    return 0


def cmd_demo(args) -> int:
    from orchestration import demo

    demo.VERBOSE = args.verbose
    return demo.main()


def cmd_run(args) -> int:
    from pathlib import Path

    from orchestration import demo

    demo.VERBOSE = args.verbose
    if not args.crawl_root:
        print("give --crawl-root DIR or set TOKENLAKE_CRAWL_ROOT", file=sys.stderr)
        return 2
    root = Path(args.crawl_root).expanduser().resolve()
    if not (root / "crawl-data").is_dir():
        print(
            f"--crawl-root {str(root)!r} has no crawl-data/ directory (expected Common Crawl's layout: "
            f"crawl-data/<CRAWL>/segments/<SEGMENT>/warc/*.warc.gz)",
            file=sys.stderr,
        )
        return 2
    return demo.run_and_report(resume=not args.force, crawl_root=str(root))


def cmd_runview_list(_args) -> int:
    from assets.run_view.store import list_run_views

    rows = list_run_views(Lakehouse())
    print(f"{'run_view_id':<34} {'status':<10} {'samples':>8} {'tokens':>12}  {'reviewer':<12} created")
    for r in rows:
        print(
            f"{r['run_view_id']:<34} {r['status']:<10} {r['n_samples']:>8} {r['n_tokens']:>12,}  "
            f"{r['reviewer'] or '-':<12} {r['created_at'].isoformat(timespec='seconds')}"
        )
    if not rows:
        print("(none: materialise run_view/candidate, e.g. `make demo`)")
    return 0


def cmd_runview_show(args) -> int:
    from assets.run_view.store import load_manifest

    row = load_manifest(Lakehouse(), args.run_view_id)
    if row is None:
        print(f"unknown run view {args.run_view_id!r}; see `tokenlake runview list`", file=sys.stderr)
        return 2
    m = row.pop("manifest")
    row.pop("manifest_json")
    for k, v in row.items():
        print(f"{k:<22} {v.isoformat(timespec='seconds') if isinstance(v, datetime) else v}")
    print("\nmixture (token shares)")
    print(f"  {'component':<16} {'requested':>10} {'realised':>10} {'doc share':>10} {'tokens':>12} {'documents':>10}")
    for r in m["realised"]:
        print(
            f"  {r['component']:<16} {r['requested_share']:>10.2%} {r['token_share']:>10.2%} "
            f"{r['document_share']:>10.2%} {r['tokens']:>12,} {r['documents']:>10}"
        )
    print("\nmanifest")
    print(json.dumps({k: v for k, v in m.items() if k != "realised"}, indent=2, sort_keys=True))
    return 0


def _run_job(name: str, op: str, config: dict, source: str, verbose: bool):
    """The op's output of a job run on the local instance (in the UI's run history); None, said why, on failure."""
    ok, out = run_local_job(name, op, config, source, verbose=verbose)
    if not ok:
        print(f"{name} failed: {out}", file=sys.stderr)
        return None
    return out


def cmd_runview_decide(args) -> int:
    """Launch publish_run_view on the local instance: the same op, checks lookup and refusals as the UI."""
    cfg = {
        "run_view_id": args.run_view_id,
        "manifest_sha256": args.sha256,
        "reviewer": args.reviewer,
        "decision": args.command_name,
        "comment": args.comment,
    }
    status = _run_job("publish_run_view", "decide_run_view", cfg, "tokenlake runview", args.verbose)
    if status is None:
        return 1
    print(f"run view {args.run_view_id}: {status} by {args.reviewer}")
    return 0


def cmd_delete(args) -> int:
    rid = _run_job(
        "request_deletion",
        "record_deletion_request",
        {"key_type": args.key_type, "value": args.value, "reason": args.reason, "requested_by": args.requested_by},
        "tokenlake delete",
        args.verbose,
    )
    if rid is None:
        return 1
    print(f"deletion request {rid} recorded (pending)")
    if not args.now:
        print("the deletion_requests sensor propagates it (dagster dev), or run: tokenlake delete ... --now")
        return 0
    report = _run_job("propagate_deletion", "propagate", {"request_id": rid}, "tokenlake delete --now", args.verbose)
    if report is None:
        return 1
    _print_report(report)
    return 0


def _print_report(report: dict) -> None:
    print(f"request {report['request_id']}: {report['key_type']} {report['value']}")
    print("  reaches " + ", ".join(f"{n} {k}" for k, n in report["lineage_keys"].items()))
    print(f"  {'table':<28} {'deleted':>8} {'expired':>8} {'files':>6} {'left':>5} {'scanned':>8}")
    for table, r in sorted(report["tables"].items()):
        print(
            f"  {table:<28} {r['rows_deleted']:>8} {r['snapshots_expired']:>8} {r['files_removed']:>6} "
            f"{r['matching_rows_in_retained_snapshots']:>5} {r['retained_snapshots_scanned']:>8}"
        )
    print(f"  superseded run views: {', '.join(report['superseded_run_views']) or 'none'}; erased: {report['erased']}")


def cmd_deletions(args) -> int:
    from assets.governance.requests import list_requests, load_request

    lakehouse = Lakehouse()
    if args.request_id:
        row = load_request(lakehouse, args.request_id)
        if row is None:
            print(f"unknown deletion request {args.request_id!r}", file=sys.stderr)
            return 2
        if not row["report_json"]:
            print(f"{args.request_id} is {row['status']}: no report yet")
            return 0
        _print_report(json.loads(row["report_json"]))
        return 0
    for r in list_requests(lakehouse):
        print(f"{r['request_id']}  {r['status']:<9} {r['key_type']:<12} {r['value']:<50} {r['requested_by']}")
    return 0


def cmd_log(args) -> int:
    """Print a run's event log from the local instance, its failure's traceback included."""
    prepare_dagster_home()
    import dagster as dg  # here: the commands that only read tables never import Dagster

    with dg.DagsterInstance.get() as instance:
        lines = run_log(instance, args.run_id)
    if not lines:
        print(f"no run {args.run_id!r} in {os.environ['DAGSTER_HOME']}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def cmd_provenance(args) -> int:
    from assets.governance.provenance import provenance

    found = provenance(
        Lakehouse(),
        doc_id=args.doc_id,
        url=args.url,
        global_batch_size=args.global_batch_size,
        epochs=range(args.epochs),
    )
    if not found:
        print("no such document in curated.documents", file=sys.stderr)
        return 2
    print(json.dumps(found, indent=2, sort_keys=True, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tokenlake", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--verbose", action="store_true", help="print Dagster's own events too (failures in full)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("tables", help="every table with rows, files and current snapshot").set_defaults(fn=cmd_tables)
    snaps = sub.add_parser("snapshots", help="a table's snapshots with provenance")
    snaps.add_argument("table")
    snaps.add_argument("-n", type=int, default=10, help="how many, newest first")
    snaps.set_defaults(fn=cmd_snapshots)
    digest = sub.add_parser("digest", help="row count and content digest of every table, run view samples digests")
    digest.add_argument("--json", action="store_true", help="one JSON object on one line")
    digest.set_defaults(fn=cmd_digest)
    demo = sub.add_parser("demo", help="run the pipeline on the sample crawl")
    demo.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help="as `tokenlake --verbose`")
    demo.set_defaults(fn=cmd_demo)
    run = sub.add_parser("run", help="run the pipeline on a crawl directory, skipping what is already done")
    run.add_argument(
        "--crawl-root",
        default=os.environ.get("TOKENLAKE_CRAWL_ROOT"),
        required=False,
        help="a directory in Common Crawl's layout (default: TOKENLAKE_CRAWL_ROOT)",
    )
    run.add_argument("--force", action="store_true", help="materialise every partition again")
    run.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help="as `tokenlake --verbose`")
    run.set_defaults(fn=cmd_run)
    rv = sub.add_parser("runview", help="list, inspect, approve or reject run views").add_subparsers(
        dest="action", required=True
    )
    rv.add_parser("list", help="every run view").set_defaults(fn=cmd_runview_list)
    show = rv.add_parser("show", help="one run view's manifest")
    show.add_argument("run_view_id")
    show.set_defaults(fn=cmd_runview_show)
    for action in ("approve", "reject"):
        p = rv.add_parser(action, help=f"{action} a candidate (launches the publish_run_view job)")
        p.add_argument("run_view_id")
        p.add_argument("--sha256", required=True, help="the manifest_sha256 you reviewed")
        p.add_argument("--reviewer", required=True, help="your name: recorded on the run view")
        p.add_argument("--comment", default="", required=action == "reject", help="why (required to reject)")
        p.set_defaults(fn=cmd_runview_decide, command_name=action)
    delete = sub.add_parser("delete", help="record (and with --now propagate) a deletion request")
    delete.add_argument("key_type", choices=KEY_TYPES)
    delete.add_argument("value")
    delete.add_argument("--reason", required=True)
    delete.add_argument("--requested-by", required=True)
    delete.add_argument("--now", action="store_true", help="propagate here instead of waiting for the sensor")
    delete.set_defaults(fn=cmd_delete)
    dels = sub.add_parser("deletions", help="deletion requests, or one request's report")
    dels.add_argument("request_id", nargs="?")
    dels.set_defaults(fn=cmd_deletions)
    log = sub.add_parser("log", help="a run's event log (a failure's traceback included)")
    log.add_argument("run_id")
    log.set_defaults(fn=cmd_log)
    prov = sub.add_parser("provenance", help="a document's lineage from WARC record to training steps")
    which = prov.add_mutually_exclusive_group(required=True)
    which.add_argument("--doc-id")
    which.add_argument("--url")
    prov.add_argument("--global-batch-size", type=int, default=None, help="to list the global steps serving it")
    prov.add_argument("--epochs", type=int, default=1, help="epochs to list steps for")
    prov.set_defaults(fn=cmd_provenance)
    from orchestration.capacity import add_parser as register_capacity  # capacity

    register_capacity(sub)
    from orchestration.propose import register as register_proposals  # propose, proposals

    register_proposals(sub)
    from orchestration.benchmark_cli import register_parser as register_benchmarks  # benchmark add, list

    register_benchmarks(sub)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
