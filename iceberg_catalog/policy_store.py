"""Reading governance.policies: the versions of a kind of policy, the active one, and the snapshot properties
that name it. Dagster-free, and below the states: curated reads its thresholds and run_view its mixture here,
each mapping a policy's values to its own parameters; governance (above them) writes the versions.

Exactly one version per kind is `active`. Version 0 is the code's defaults, which the state that owns the kind
passes in: it exists implicitly until the first proposal of its kind is applied. A Launchpad config that differs
from the defaults is an ad-hoc experiment: the snapshot says `<kind>/adhoc` instead of a version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pyiceberg.expressions import EqualTo

from iceberg_catalog.commit import POLICY_VERSION
from iceberg_catalog.lakehouse import Lakehouse
from iceberg_catalog.run_view_contract import canonical_json
from iceberg_catalog.schemas import GOVERNANCE_POLICIES

KINDS = ("thresholds", "mixture", "deletion")
STATUSES = ("active", "retired", "rolled_back")
CODE_DEFAULTS = "code-defaults"
ADHOC = "adhoc"
VERSION_PROPERTY = POLICY_VERSION  # snapshot property tokenlake.policy-version (joined with inherited ones)
SHA_PROPERTY = "policy-sha256"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"policy kind must be one of {KINDS}, got {kind!r}")


def canonical_value(value: object) -> object:
    """`value` as the JSON values its canonical text reads back as (tuples become lists, keys strings)."""
    return json.loads(canonical_json(value))


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
        """The version as a row of governance.policies: its fields, the policy as canonical JSON and its sha256."""
        columns = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "policy"}
        stored = {"policy_json": self.policy_json, "policy_sha256": self.sha256}
        return {**columns, **stored, "created_at": self.created_at or datetime.now(UTC)}

    @classmethod
    def from_row(cls, row: Mapping) -> Policy:
        """A version as stored: the row's columns by field name, the policy parsed from its canonical JSON."""
        columns = {f.name: row[f.name] for f in dataclasses.fields(cls) if f.name != "policy"}
        return cls(policy=json.loads(row["policy_json"]), **columns)


def versions(lakehouse: Lakehouse, kind: str) -> list[Policy]:
    """Every stored version of `kind`, oldest first (empty until a proposal of the kind was applied)."""
    check_kind(kind)
    rows = lakehouse.scan(GOVERNANCE_POLICIES, row_filter=EqualTo("kind", kind)).to_pylist()
    return sorted((Policy.from_row(r) for r in rows), key=lambda p: p.version)


def active(lakehouse: Lakehouse, kind: str, defaults: Mapping) -> Policy:
    """The active version of `kind`; version 0 with the code's `defaults` when none was ever applied."""
    found = [p for p in versions(lakehouse, kind) if p.status == "active"]
    if len(found) > 1:
        raise RuntimeError(
            f"{GOVERNANCE_POLICIES}: {len(found)} active versions of {kind}: {[p.version for p in found]}"
        )
    return found[0] if found else Policy(kind, 0, dict(defaults))


def adhoc_label(kind: str) -> str:
    """What a snapshot written under a Launchpad config instead of the approved `kind` policy carries."""
    check_kind(kind)
    return f"{kind}/{ADHOC}"


def adhoc_stamp(kind: str, policy: Mapping) -> dict[str, str]:
    """The snapshot properties of a run under the ad-hoc `policy` of `kind`."""
    return {VERSION_PROPERTY: adhoc_label(kind), SHA_PROPERTY: sha256_hex(canonical_json(policy))}


def governed(lakehouse: Lakehouse, kind: str, given: Mapping, defaults: Mapping) -> tuple[dict, dict[str, str]]:
    """The `kind` policy a run uses and the snapshot properties naming it: the active version's, unless the run's
    config (`given`) differs from the code's `defaults` (an ad-hoc experiment: it wins, stamped so)."""
    given = canonical_value(given)
    if given != canonical_value(defaults):
        return given, adhoc_stamp(kind, given)
    policy = active(lakehouse, kind, defaults)
    return policy.policy, policy.snapshot_properties()
