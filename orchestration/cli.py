"""`tokenlake`: look at the lakehouse from a terminal.

  tokenlake tables                      every table: rows, data files, current snapshot
  tokenlake snapshots TABLE [-n 10]     a table's snapshot history with its provenance properties
  tokenlake demo                        the `make demo` pipeline on the sample crawl
  tokenlake runview list                every run view: id, status, samples, tokens, reviewer
  tokenlake runview show ID             one run view's manifest (mixture requested vs realised, inputs, ...)
  tokenlake runview approve|reject ID --sha256 HASH --reviewer NAME [--comment TEXT]
                                        launch the publish_run_view job (the same gate as the UI Launchpad)
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

from iceberg_catalog import TABLES, Provenance, open_catalog


def cmd_tables(_args) -> int:
    catalog = open_catalog()
    print(f"{'table':<30} {'rows':>10} {'files':>6}  snapshot")
    for ident in TABLES:
        table = catalog.load_table(ident)
        snap = table.current_snapshot()
        summary = snap.summary.additional_properties if snap else {}
        print(f"{ident:<30} {summary.get('total-records', '0'):>10} {summary.get('total-data-files', '0'):>6}  "
              f"{snap.snapshot_id if snap else '-'}")
    return 0


def cmd_snapshots(args) -> int:
    if args.table not in TABLES:
        print(f"unknown table {args.table!r}; tables: {', '.join(TABLES)}", file=sys.stderr)
        return 2
    table = open_catalog().load_table(args.table)
    snaps = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)[: args.n]
    for snap in snaps:
        when = datetime.fromtimestamp(snap.timestamp_ms / 1000, timezone.utc).isoformat(timespec="seconds")
        props = Provenance.from_snapshot_summary(snap.summary.additional_properties)
        print(f"{snap.snapshot_id}  {when}  {snap.summary.operation.value:<9} "
              f"records {snap.summary.additional_properties.get('total-records', '?')}")
        print("    " + json.dumps(props, sort_keys=True))
    return 0


def cmd_demo(_args) -> int:
    from orchestration.demo import main

    return main()


def cmd_runview_list(_args) -> int:
    from assets.run_view.store import list_run_views

    rows = list_run_views(open_catalog())
    print(f"{'run_view_id':<34} {'status':<10} {'samples':>8} {'tokens':>12}  {'reviewer':<12} created")
    for r in rows:
        print(f"{r['run_view_id']:<34} {r['status']:<10} {r['n_samples']:>8} {r['n_tokens']:>12,}  "
              f"{r['reviewer'] or '-':<12} {r['created_at'].isoformat(timespec='seconds')}")
    if not rows:
        print("(none: materialise run_view/candidate, e.g. `make demo`)")
    return 0


def cmd_runview_show(args) -> int:
    from assets.run_view.store import load_manifest

    row = load_manifest(open_catalog(), args.run_view_id)
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
        print(f"  {r['component']:<16} {r['requested_share']:>10.2%} {r['token_share']:>10.2%} "
              f"{r['document_share']:>10.2%} {r['tokens']:>12,} {r['documents']:>10}")
    print("\nmanifest")
    print(json.dumps({k: v for k, v in m.items() if k != "realised"}, indent=2, sort_keys=True))
    return 0


def cmd_runview_decide(args) -> int:
    """Launch publish_run_view on the local instance: the same op, checks lookup and refusals as the UI."""
    import dagster as dg

    from orchestration.instance import prepare_dagster_home

    prepare_dagster_home()
    from orchestration.definitions import defs

    cfg = {"run_view_id": args.run_view_id, "manifest_sha256": args.sha256, "reviewer": args.reviewer,
           "decision": args.command_name, "comment": args.comment}
    with dg.DagsterInstance.get() as instance:
        res = defs.resolve_job_def("publish_run_view").execute_in_process(
            instance=instance, run_config={"ops": {"decide_run_view": {"config": cfg}}}, raise_on_error=False,
            tags={"tokenlake/source": "tokenlake runview"})
    if not res.success:
        failure = next((e for e in res.all_events if e.event_type_value == "STEP_FAILURE"), None)
        print(f"refused: {failure.step_failure_data.error.message.strip() if failure else 'see run ' + res.run_id}",
              file=sys.stderr)
        return 1
    print(f"run view {args.run_view_id}: {res.output_for_node('decide_run_view')} by {args.reviewer} (run {res.run_id})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tokenlake", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("tables", help="every table with rows, files and current snapshot").set_defaults(fn=cmd_tables)
    snaps = sub.add_parser("snapshots", help="a table's snapshots with provenance")
    snaps.add_argument("table")
    snaps.add_argument("-n", type=int, default=10, help="how many, newest first")
    snaps.set_defaults(fn=cmd_snapshots)
    sub.add_parser("demo", help="run the pipeline on the sample crawl").set_defaults(fn=cmd_demo)
    rv = sub.add_parser("runview", help="list, inspect, approve or reject run views").add_subparsers(
        dest="action", required=True)
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
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
