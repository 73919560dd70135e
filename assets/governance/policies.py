"""Versioned policies: the curation thresholds, the run-view mixture and the deletion policy as rows of
governance.policies (canonical JSON + sha256, parent version, who proposed it, who approved it). No Dagster.

Exactly one version per kind is `active`. Version 0 is the code's defaults; it exists implicitly until the
first proposal of its kind is applied, which writes it (status `retired`) next to version 1. Changing the
active version rewrites the kind's partition in one commit, so the table's snapshot history is the audit log.
Assets read the active version (`governed_params`) and stamp it on their snapshots (`tokenlake.policy-version`).
A Launchpad config that differs from the defaults is an ad-hoc experiment: it wins, and the snapshot says
`<kind>/adhoc` instead of a version. Downstream snapshots inherit the versions of what they read
(`iceberg_catalog.commit.inherited_policy_versions`), so `tokenlake.policy-version` may name several, e.g.
`mixture/1,thresholds/2`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyiceberg.expressions import EqualTo

from assets.curated.pipeline import CurateParams
from assets.curated.quality import QualityThresholds
from iceberg_catalog import Lakehouse, Provenance, tokenlake_home
from iceberg_catalog.commit import CARRIED_POLICY_VERSIONS, POLICY_VERSION
from iceberg_catalog.schemas import CURATED_DOCUMENTS, GOVERNANCE_POLICIES

KINDS = ("thresholds", "mixture", "deletion")
STATUSES = ("active", "retired", "rolled_back")
CODE_DEFAULTS = "code-defaults"
ADHOC = "adhoc"
VERSION_PROPERTY = POLICY_VERSION  # snapshot property tokenlake.policy-version (joined with inherited ones)
SHA_PROPERTY = "policy-sha256"
THRESHOLD_FIELDS = ("language_threshold", "allowed_languages", "quality", "ppl_head_pct", "ppl_tail_pct")
# What a quality field that a stored thresholds policy lacks means: the value it was approved under. A version
# written before `per_language` existed judged every language by the English rules, so it reads as off. A field
# not listed here takes the code's default.
ABSENT_QUALITY_FIELDS = {"per_language": False}
GOVERNANCE_CONFIG_ENV = "TOKENLAKE_GOVERNANCE_CONFIG"


def canonical_json(value: object) -> str:
    """The bytes that are hashed: sorted keys, no whitespace, UTF-8, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"policy kind must be one of {KINDS}, got {kind!r}")


# ---- the policies' content ---------------------------------------------------------------------------------


def thresholds_of(params: CurateParams) -> dict:
    """The governed part of curated/documents' parameters (what decides kept / dropped and the buckets)."""
    out = {name: getattr(params, name) for name in THRESHOLD_FIELDS}
    out["quality"] = dataclasses.asdict(params.quality)
    out["allowed_languages"] = list(params.allowed_languages) if params.allowed_languages is not None else None
    return json.loads(canonical_json(out))


def quality_thresholds(policy: Mapping) -> QualityThresholds:
    """The quality thresholds of a `thresholds` policy as stored: a field it lacks (it was approved before the
    field existed) means what it did then (`ABSENT_QUALITY_FIELDS`), not today's default. The stored JSON and
    its sha256 stay as approved."""
    return QualityThresholds(**{**ABSENT_QUALITY_FIELDS, **policy["quality"]})


def with_thresholds(params: CurateParams, policy: Mapping) -> CurateParams:
    """`params` with the thresholds of a `thresholds` policy."""
    allowed = policy["allowed_languages"]
    return dataclasses.replace(
        params,
        language_threshold=policy["language_threshold"],
        allowed_languages=tuple(allowed) if allowed is not None else None,
        quality=quality_thresholds(policy),
        ppl_head_pct=policy["ppl_head_pct"],
        ppl_tail_pct=policy["ppl_tail_pct"],
    )


def default_policy(kind: str) -> dict:
    """Version 0 of `kind`: what the code does without any approved change."""
    _check_kind(kind)
    if kind == "thresholds":
        return thresholds_of(CurateParams())
    if kind == "mixture":
        from assets.run_view.store import RunViewSpec

        return {"components": [c.as_dict() for c in RunViewSpec().components]}
    return {"rules": []}  # deletion: standing rules (key_type, value, reason), none by default


def validate_policy(kind: str, policy: Mapping) -> dict:
    """The policy as canonical JSON values, after checking it can be used (raises ValueError otherwise)."""
    _check_kind(kind)
    value = json.loads(canonical_json(policy))
    if kind == "thresholds":
        missing = sorted(set(THRESHOLD_FIELDS) - set(value))
        extra = sorted(set(value) - set(THRESHOLD_FIELDS))
        if missing or extra:
            raise ValueError(f"a thresholds policy has exactly {THRESHOLD_FIELDS}; missing {missing}, unknown {extra}")
        with_thresholds(CurateParams(), value)  # unknown quality fields raise TypeError here
    elif kind == "mixture":
        from assets.run_view.mixture import Component

        comps = value.get("components")
        if not comps:
            raise ValueError("a mixture policy needs `components`: [{name, weight, filters, max_repetitions}]")
        [Component(**c) for c in comps]
    else:
        from assets.governance.requests import KEY_TYPES

        for rule in value.get("rules", []):
            if rule.get("key_type") not in KEY_TYPES or not rule.get("value"):
                raise ValueError(f"a deletion rule needs key_type in {KEY_TYPES} and a value, got {rule!r}")
    return value


# ---- versions in governance.policies -------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """One version of one kind of policy."""

    kind: str
    version: int
    policy: dict
    status: str = "active"
    parent_version: int | None = None
    created_by: str = CODE_DEFAULTS
    approved_by: str | None = None
    proposal_id: str | None = None
    created_at: datetime | None = None
    activated_at: datetime | None = None

    @property
    def policy_json(self) -> str:
        return canonical_json(self.policy)

    @property
    def sha256(self) -> str:
        return sha256_hex(self.policy_json)

    @property
    def label(self) -> str:
        """What snapshots carry as tokenlake.policy-version: `<kind>/<version>`."""
        return f"{self.kind}/{self.version}"

    def snapshot_properties(self) -> dict[str, str]:
        return {VERSION_PROPERTY: self.label, SHA_PROPERTY: self.sha256}

    def row(self) -> dict:
        return {
            "kind": self.kind,
            "version": self.version,
            "policy_json": self.policy_json,
            "policy_sha256": self.sha256,
            "parent_version": self.parent_version,
            "status": self.status,
            "created_by": self.created_by,
            "approved_by": self.approved_by,
            "proposal_id": self.proposal_id,
            "created_at": self.created_at or _now(),
            "activated_at": self.activated_at,
        }

    @classmethod
    def from_row(cls, row: Mapping) -> Policy:
        return cls(
            row["kind"],
            row["version"],
            json.loads(row["policy_json"]),
            row["status"],
            row["parent_version"],
            row["created_by"],
            row["approved_by"],
            row["proposal_id"],
            row["created_at"],
            row["activated_at"],
        )


def _now() -> datetime:
    return datetime.now(UTC)


def builtin(kind: str) -> Policy:
    """Version 0: the code's defaults."""
    return Policy(kind, 0, default_policy(kind))


def versions(lakehouse: Lakehouse, kind: str) -> list[Policy]:
    """Every stored version of `kind`, oldest first (empty until a proposal of the kind was applied)."""
    _check_kind(kind)
    rows = lakehouse.scan(GOVERNANCE_POLICIES, row_filter=EqualTo("kind", kind)).to_pylist()
    return sorted((Policy.from_row(r) for r in rows), key=lambda p: p.version)


def active(lakehouse: Lakehouse, kind: str) -> Policy:
    """The active version of `kind` (version 0, the code's defaults, when none was ever applied)."""
    found = [p for p in versions(lakehouse, kind) if p.status == "active"]
    if len(found) > 1:
        raise RuntimeError(
            f"{GOVERNANCE_POLICIES}: {len(found)} active versions of {kind}: {[p.version for p in found]}"
        )
    return found[0] if found else builtin(kind)


def version(lakehouse: Lakehouse, kind: str, number: int) -> Policy | None:
    """One version of `kind` (version 0 always exists)."""
    found = [p for p in versions(lakehouse, kind) if p.version == number]
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
    stored = versions(lakehouse, kind) or [dataclasses.replace(builtin(kind), created_at=_now(), activated_at=None)]
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
    stored = versions(lakehouse, kind)
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


# ---- what assets read and stamp --------------------------------------------------------------------------


def governed_params(lakehouse: Lakehouse, params: CurateParams) -> tuple[CurateParams, dict[str, str]]:
    """The parameters curated/documents runs with and the snapshot properties naming their policy: the active
    thresholds version, unless the Launchpad config changes a threshold (an ad-hoc experiment, stamped so)."""
    if thresholds_of(params) != thresholds_of(CurateParams()):
        return params, adhoc_stamp("thresholds", thresholds_of(params))
    policy = active(lakehouse, "thresholds")
    return with_thresholds(params, policy.policy), policy.snapshot_properties()


def governed_mixture(lakehouse: Lakehouse, components: Sequence[Mapping]) -> tuple[list[dict], dict[str, str]]:
    """The mixture components run_view/candidate builds with and the snapshot properties naming their policy:
    the active mixture version's, unless the Launchpad config changes the components (an ad-hoc experiment)."""
    given = json.loads(canonical_json({"components": list(components)}))
    if given != default_policy("mixture"):
        return given["components"], adhoc_stamp("mixture", given)
    policy = active(lakehouse, "mixture")
    return policy.policy["components"], policy.snapshot_properties()


def adhoc_label(kind: str) -> str:
    """What a snapshot written under a Launchpad config instead of the approved `kind` policy carries."""
    _check_kind(kind)
    return f"{kind}/{ADHOC}"


def adhoc_stamp(kind: str, policy: Mapping) -> dict[str, str]:
    return {VERSION_PROPERTY: adhoc_label(kind), SHA_PROPERTY: sha256_hex(canonical_json(policy))}


def policy_stamp(lakehouse: Lakehouse, kind: str) -> dict[str, str]:
    """The snapshot properties naming the active version of `kind`."""
    return active(lakehouse, kind).snapshot_properties()


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
    import yaml

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
    import yaml

    path = governance_config_path()
    data = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    return float(data.get("funnel_drift_margin", 0.10))
