"""The `thresholds` policy as curated/documents' parameters: which fields of `CurateParams` it governs, the
parameters under a stored version, and the stamp naming the version a partition was curated under. The
versions themselves are read through `iceberg_catalog.policy_store`; governance writes them. No Dagster."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from assets.curated.extract import DEFAULT_ENGINE
from assets.curated.pipeline import CurateParams
from assets.curated.quality import QualityThresholds
from iceberg_catalog import Lakehouse
from iceberg_catalog import policy_store as store

KIND = "thresholds"
THRESHOLD_FIELDS = ("language_threshold", "allowed_languages", "quality", "ppl_head_pct", "ppl_tail_pct")
# What a quality field that a stored thresholds policy lacks means: the value it was approved under. A version
# written before `per_language` existed judged every language by the English rules, so it reads as off. A field
# not listed here takes the code's default.
ABSENT_QUALITY_FIELDS = {"per_language": False}
# Top-level fields a thresholds policy may omit, and what their absence means: the value every version stored
# before the field existed ran with. `thresholds_of` leaves such a field out at that value, so version 0 (and
# any version that keeps it) has the same JSON and sha256 as before the field existed.
OPTIONAL_FIELDS = {"extractor": DEFAULT_ENGINE}


def thresholds_of(params: CurateParams) -> dict:
    """The governed part of curated/documents' parameters (what decides kept / dropped and the buckets)."""
    out = {name: getattr(params, name) for name in THRESHOLD_FIELDS}
    out["quality"] = dataclasses.asdict(params.quality)
    out["allowed_languages"] = list(params.allowed_languages) if params.allowed_languages is not None else None
    out.update({k: getattr(params, k) for k, absent in OPTIONAL_FIELDS.items() if getattr(params, k) != absent})
    return store.canonical_value(out)


def default_thresholds() -> dict:
    """Version 0 of the thresholds: the published defaults the code runs without an approved change."""
    return thresholds_of(CurateParams())


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
        **{k: policy.get(k, absent) for k, absent in OPTIONAL_FIELDS.items()},
    )


def governed_params(lakehouse: Lakehouse, params: CurateParams) -> tuple[CurateParams, dict[str, str]]:
    """The parameters curated/documents runs with and the snapshot properties naming their policy: the active
    thresholds version, unless the Launchpad config changes a threshold (an ad-hoc experiment, stamped so)."""
    given = thresholds_of(params)
    policy, stamp = store.governed(lakehouse, KIND, given, default_thresholds())
    return (params if policy == given else with_thresholds(params, policy)), stamp


def thresholds_stamp(lakehouse: Lakehouse) -> dict[str, str]:
    """The snapshot properties naming the active thresholds version."""
    return store.active(lakehouse, KIND, default_thresholds()).snapshot_properties()
