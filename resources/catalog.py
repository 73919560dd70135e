"""The Iceberg catalog as a Dagster resource: configuration only; the logic is in `iceberg_catalog`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import dagster as dg
from pydantic import Field, PrivateAttr
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from iceberg_catalog import CatalogConfig, PartitionWriter, open_catalog
from iceberg_catalog.catalog import load_table


class IcebergCatalogResource(dg.ConfigurableResource):
    """The lakehouse catalog. Empty `properties` means `TOKENLAKE_CATALOG`'s file or the embedded default
    (SQLite + local warehouse under `TOKENLAKE_HOME`); otherwise they go unchanged to pyiceberg."""

    name: str = "tokenlake"
    properties: dict[str, str] = Field(default_factory=dict)

    _catalog: Catalog | None = PrivateAttr(default=None)

    @property
    def config(self) -> CatalogConfig:
        return CatalogConfig.resolve(self.name, self.properties)

    def catalog(self) -> Catalog:
        """The opened catalog, with every namespace and declared table created on first use."""
        if self._catalog is None:
            self._catalog = open_catalog(self.config)
        return self._catalog

    def table(self, identifier: str) -> Table:
        return load_table(self.catalog(), identifier)

    def partition_writer(self, identifier: str, partition: Mapping[str, str], **kwargs) -> PartitionWriter:
        """A streaming writer that replaces exactly `partition` of `identifier` on commit."""
        return PartitionWriter(self.catalog(), identifier, partition,
                               catalog_fingerprint=self.config.fingerprint(), **kwargs)

    def snapshot_ids(self, identifiers: Iterable[str]) -> dict[str, int | None]:
        """Current snapshot id per table: what a downstream asset read, for its provenance."""
        out: dict[str, int | None] = {}
        for ident in identifiers:
            snap = self.table(ident).current_snapshot()
            out[ident] = snap.snapshot_id if snap else None
        return out
