"""Versioned policies: the curation thresholds, the run-view mixture and the deletion policy as rows of
governance.policies (canonical JSON + sha256, parent version, who proposed it, who approved it). No Dagster.

Exactly one version per kind is `active`. Version 0 is the code's defaults; it exists implicitly until the
first proposal of its kind is applied, which writes it (status `retired`) next to version 1. Changing the
active version rewrites the kind's partition in one commit, so the table's snapshot history is the audit log.
The states read the active version through `iceberg_catalog.policy_store` (curated's thresholds:
`assets.curated.policy`, run_view's mixture: `assets.run_view.policy`) and stamp it on their snapshots
(`tokenlake.policy-version`); this module writes versions and imports the states, never the reverse.
A Launchpad config that differs from the defaults is an ad-hoc experiment: it wins, and the snapshot says
`<kind>/adhoc` instead of a version. Downstream snapshots inherit the versions of what they read
(`iceberg_catalog.commit.inherited_policy_versions`), so `tokenlake.policy-version` may name several, e.g.
`mixture/1,thresholds/2`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import yaml

from assets.curated.pipeline import CurateParams
from assets.curated.policy import OPTIONAL_FIELDS, THRESHOLD_FIELDS, default_thresholds, with_thresholds
from assets.governance.requests import KEY_TYPES
from assets.run_view.mixture import Component
from assets.run_view.policy import default_mixture
from iceberg_catalog import Lakehouse, Provenance, tokenlake_home
from iceberg_catalog import policy_store as store
from iceberg_catalog.commit import CARRIED_POLICY_VERSIONS
from iceberg_catalog.policy_store import SHA_PROPERTY, VERSION_PROPERTY, Policy, canonical_value, check_kind
from iceberg_catalog.schemas import CURATED_DOCUMENTS, GOVERNANCE_POLICIES

GOVERNANCE_CONFIG_ENV = "TOKENLAKE_GOVERNANCE_CONFIG"


# ---- the policies' content ---------------------------------------------------------------------------------


def default_policy(kind: str) -> dict:
    """Version 0 of `kind`: what the code does without any approved change."""
    check_kind(kind)
    if kind == "thresholds":
        return default_thresholds()
    if kind == "mixture":
        return default_mixture()
    return {"rules": []}  # deletion: standing rules (key_type, value, reason), none by default


def validate_policy(kind: str, policy: Mapping) -> dict:
    """The policy as canonical JSON values, after checking it can be used (raises ValueError otherwise)."""
    check_kind(kind)
    value = canonical_value(policy)
    if kind == "thresholds":
        missing = sorted(set(THRESHOLD_FIELDS) - set(value))
        extra = sorted(set(value) - set(THRESHOLD_FIELDS) - set(OPTIONAL_FIELDS))
        if missing or extra:
            raise ValueError(f"a thresholds policy has exactly {THRESHOLD_FIELDS}; missing {missing}, unknown {extra}")
        with_thresholds(CurateParams(), value)  # unknown quality fields raise TypeError here
    elif kind == "mixture":
        comps = value.get("components")
        if not comps:
            raise ValueError("a mixture policy needs `components`: [{name, weight, filters, max_repetitions}]")
        [Component(**c) for c in comps]
    else:
        for rule in value.get("rules", []):
            if rule.get("key_type") not in KEY_TYPES or not rule.get("value"):
                raise ValueError(f"a deletion rule needs key_type in {KEY_TYPES} and a value, got {rule!r}")
    return value


# ---- versions in governance.policies -------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def builtin(kind: str) -> Policy:
    """Version 0: the code's defaults."""
    return Policy(kind, 0, default_policy(kind))


def active(lakehouse: Lakehouse, kind: str) -> Policy:
    """The active version of `kind` (version 0, the code's defaults, when none was ever applied)."""
    return store.active(lakehouse, kind, default_policy(kind))


def version(lakehouse: Lakehouse, kind: str, number: int) -> Policy | None:
    """One version of `kind` (version 0 always exists)."""
    found = [p for p in store.versions(lakehouse, kind) if p.version == number]
    return found[0] if found else (builtin(kind) if number == 0 else None)


def _write(lakehouse: Lakehouse, kind: str, policies: Sequence[Policy], provenance: Provenance) -> int | None:
    writer = lakehouse.writer(GOVERNANCE_POLICIES, {"kind": kind})
    rows = [p.row() for p in sorted(policies, key=lambda p: p.version)]
    writer.write(pa.Table.from_pylist(rows, schema=GOVERNANCE_POLICIES.arrow_schema))
    return writer.commit(provenance).snapshot_id


def activate(
    lakehouse: Lakehouse,
    kind: str,
    policy: Mapping,
    created_by: str,
    approved_by: str,
    proposal_id: str,
    provenance: Provenance,
) -> Policy:
    """Make `policy` the next version of `kind` and active (the previous active one retired); one commit."""
    stored = store.versions(lakehouse, kind) or [
        dataclasses.replace(builtin(kind), created_at=_now(), activated_at=None)
    ]
    current = next((p for p in stored if p.status == "active"), stored[0])
    now = _now()
    new = Policy(
        kind,
        max(p.version for p in stored) + 1,
        validate_policy(kind, policy),
        "active",
        current.version,
        created_by,
        approved_by,
        proposal_id,
        now,
        now,
    )
    kept = [dataclasses.replace(p, status="retired") if p.status == "active" else p for p in stored]
    _write(lakehouse, kind, [*kept, new], _stamped(provenance, new))
    return new


def restore(lakehouse: Lakehouse, kind: str, number: int, provenance: Provenance) -> Policy:
    """Make stored version `number` active again and mark the active one rolled back; one commit."""
    stored = store.versions(lakehouse, kind)
    target = next((p for p in stored if p.version == number), None)
    if target is None:
        raise ValueError(f"{GOVERNANCE_POLICIES}: no version {number} of {kind} to restore")
    restored = dataclasses.replace(target, status="active", activated_at=_now())
    out = [
        restored if p.version == number else dataclasses.replace(p, status="rolled_back") if p.status == "active" else p
        for p in stored
    ]
    _write(lakehouse, kind, out, _stamped(provenance, restored))
    return restored


def _stamped(provenance: Provenance, policy: Policy) -> Provenance:
    return dataclasses.replace(provenance, extra={**provenance.extra, **policy.snapshot_properties()})


# ---- what decided a document ------------------------------------------------------------------------------


def decided_by(lakehouse: Lakehouse, crawl: str, segment: str) -> dict:
    """The policy version on the snapshot that last wrote the partition of curated.documents holding a document:
    the version that decided it (`unknown` when that snapshot was expired)."""
    table = lakehouse.table(CURATED_DOCUMENTS)
    partition_key = f"{crawl}/{segment}"
    asset_key = f"{CURATED_DOCUMENTS.namespace}/{CURATED_DOCUMENTS.name}"  # folder = namespace: the writing asset
    snap = table.current_snapshot()
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    while snap is not None:
        props = Provenance.from_snapshot_summary(snap.summary.additional_properties)
        if props.get("asset-key") == asset_key and props.get("partition-key") == partition_key:
            return {
                "policy_version": props.get(VERSION_PROPERTY, "unstamped (written before policies)"),
                "policy_sha256": props.get(SHA_PROPERTY),
                "snapshot_id": snap.snapshot_id,
                "dagster_run_id": props.get("dagster-run-id"),
            }
        carried = json.loads(props.get(CARRIED_POLICY_VERSIONS, "{}")).get("partitions", {})
        if partition_key in carried:  # a deletion expired the writing snapshot; it carries what that one said
            return {
                "policy_version": carried[partition_key] or "unstamped (written before policies)",
                "policy_sha256": None,
                "snapshot_id": snap.snapshot_id,
                "carried_by_deletion": props.get("deletion-request-id"),
            }
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return {"policy_version": "unknown (the writing snapshot was expired)", "policy_sha256": None}


# ---- who may approve ------------------------------------------------------------------------------------------


def governance_config_path() -> Path:
    """The instance's governance configuration: $TOKENLAKE_GOVERNANCE_CONFIG, else $TOKENLAKE_HOME/governance.yaml."""
    return Path(os.environ.get(GOVERNANCE_CONFIG_ENV) or tokenlake_home() / "governance.yaml")


def reviewers() -> frozenset[str]:
    """The reviewer list of this instance (`reviewers: [name, ...]` in the governance configuration); empty when
    the file or the key is missing, so nobody can approve until someone configures it."""
    path = governance_config_path()
    if not path.exists():
        return frozenset()
    data = yaml.safe_load(path.read_text()) or {}
    names = data.get("reviewers") or []
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        raise ValueError(f"{path}: `reviewers` must be a list of names, got {names!r}")
    return frozenset(n.strip() for n in names)


def funnel_drift_margin() -> float:
    """`funnel_drift_margin` in the governance configuration (default 0.10: ten points of a crawl's documents)."""
    path = governance_config_path()
    data = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    return float(data.get("funnel_drift_margin", 0.10))
