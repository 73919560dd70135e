"""The Iceberg catalog as a Dagster resource: configuration only; it hands out the `Lakehouse` handle."""

from __future__ import annotations

import dagster as dg
from pydantic import Field, PrivateAttr

from iceberg_catalog import CatalogConfig, Lakehouse


class IcebergCatalogResource(dg.ConfigurableResource):
    """The lakehouse catalog. Empty `properties` means `TOKENLAKE_CATALOG`'s file or the embedded default
    (SQLite + local warehouse under `TOKENLAKE_HOME`); otherwise they go unchanged to pyiceberg."""

    name: str = Field(default="tokenlake", description="catalog name given to pyiceberg.catalog.load_catalog")
    properties: dict[str, str] = Field(
        default_factory=dict,
        description="pyiceberg catalog properties (type, uri, warehouse, s3.*); empty: TOKENLAKE_CATALOG's file "
        "or the embedded SQLite catalog under TOKENLAKE_HOME",
    )

    _lakehouse: Lakehouse | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Before any work: a server catalog, its S3 warehouse and their credentials must answer; a wrong value
        fails the run here, named (`CatalogConfigError`). The embedded catalog needs no check."""
        config = CatalogConfig.resolve(self.name, self.properties)
        if not config.is_embedded_sqlite:
            config.check()

    def lakehouse(self) -> Lakehouse:
        """The lakehouse handle (catalog opened, namespaces and declared tables created, on first use)."""
        if self._lakehouse is None:
            self._lakehouse = Lakehouse(CatalogConfig.resolve(self.name, self.properties))
        return self._lakehouse
