"""The `mixture` policy as run_view/candidate's components: the code's default mixture, the components a
candidate is built with under the active version, and the policy a manifest records. The versions are read
through `iceberg_catalog.policy_store`; governance writes them. No Dagster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from assets.run_view.store import RunViewSpec
from iceberg_catalog import Lakehouse
from iceberg_catalog import policy_store as store

KIND = "mixture"


def default_mixture() -> dict:
    """Version 0 of the mixture: the components of the default run view spec."""
    return {"components": [c.as_dict() for c in RunViewSpec().components]}


def governed_mixture(lakehouse: Lakehouse, components: Sequence[Mapping]) -> tuple[list[dict], dict[str, str]]:
    """The mixture components run_view/candidate builds with and the snapshot properties naming their policy:
    the active mixture version's, unless the Launchpad config changes the components (an ad-hoc experiment)."""
    policy, stamp = store.governed(lakehouse, KIND, {"components": list(components)}, default_mixture())
    return policy["components"], stamp


def manifest_policy(stamp: Mapping[str, str]) -> dict[str, str]:
    """The policy a candidate's manifest records ({version, sha256}) from its snapshot properties."""
    return {"version": stamp[store.VERSION_PROPERTY], "sha256": stamp[store.SHA_PROPERTY]}


def rebuild_stamp(recorded: Mapping[str, str] | None, spec: RunViewSpec) -> dict[str, str]:
    """The snapshot properties of a rebuild: the policy its manifest `recorded`, ad hoc when it names none."""
    if recorded is None:
        return store.adhoc_stamp(KIND, {"components": [c.as_dict() for c in spec.components]})
    return {store.VERSION_PROPERTY: recorded["version"], store.SHA_PROPERTY: recorded["sha256"]}
