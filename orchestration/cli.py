"""`tokenlake`: look at the lakehouse from a terminal.

  tokenlake tables                      every table: rows, data files, current snapshot
  tokenlake snapshots TABLE [-n 10]     a table's snapshot history with its provenance properties
  tokenlake demo                        the `make demo` pipeline on the sample crawl
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
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
