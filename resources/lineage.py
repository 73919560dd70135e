"""The asset graph as a resource: deletion propagation walks the graph of the Definitions it runs in.

An op cannot reach its code location's asset graph in every execution mode (`context.repository_def` is
unset for in-process runs), so the Definitions hand it over explicitly: `lineage_resource(lambda: defs)`.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg


class AssetGraphSource:
    """Resolves the asset graph of a Definitions object when asked (after the module defining it loaded)."""

    def __init__(self, definitions: Callable[[], dg.Definitions]) -> None:
        self._definitions = definitions

    def asset_graph(self):
        return self._definitions().resolve_asset_graph()


def lineage_resource(definitions: Callable[[], dg.Definitions]) -> dg.ResourceDefinition:
    return dg.ResourceDefinition.hardcoded_resource(
        AssetGraphSource(definitions), "The asset graph that deletion propagation walks."
    )
