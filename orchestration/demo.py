"""`make demo`: run the pipeline on the sample crawl through the same Definitions the UI uses.

The sensor discovers the crawl segments and adds them as dynamic partitions; each requested partition is
then materialised in-process on the local instance (no server). Re-running replaces each partition.
"""

from __future__ import annotations

import sys
from collections import Counter

import dagster as dg

from iceberg_catalog import tokenlake_home
from orchestration.instance import prepare_dagster_home


def run_sensor_and_ingest(defs: dg.Definitions, instance: dg.DagsterInstance) -> list[str]:
    """One sensor tick (as the daemon would run it), then every requested partition in-process."""
    from orchestration.sensors import new_crawl_segments

    with dg.build_sensor_context(instance=instance, resources={"crawl_source": defs.resources["crawl_source"]}) as ctx:
        result = new_crawl_segments(ctx)
    if isinstance(result, dg.SkipReason):
        return []
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    job = defs.resolve_job_def("raw_ingest")
    keys = [r.partition_key for r in result.run_requests or []]
    for key in keys:
        print(f"materialising raw ingest for {key} ...", flush=True)
        res = job.execute_in_process(instance=instance, partition_key=key, tags={"tokenlake/source": "make demo"})
        if not res.success:
            raise SystemExit(f"raw ingest of {key} failed; see the run {res.run_id} in the Dagster UI")
    return keys


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
        print(f"  {ident:<24} snapshot {snap.snapshot_id if snap else None}  ({len(t.snapshots())} in history)")


def main() -> int:
    home = tokenlake_home()
    dagster_home = prepare_dagster_home()
    from orchestration.definitions import defs  # after DAGSTER_HOME is set

    print(f"TOKENLAKE_HOME={home}\nDAGSTER_HOME={dagster_home}")
    with dg.DagsterInstance.get() as instance:
        keys = run_sensor_and_ingest(defs, instance)
        print(f"\n{len(keys)} partitions materialised: {', '.join(keys)}")
    report(defs.resources["catalog"].catalog())
    print("\nBrowse it: DAGSTER_HOME=" + str(dagster_home) + " .venv/bin/dagster dev -w workspace.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
