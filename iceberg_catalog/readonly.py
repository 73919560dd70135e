"""Reading the embedded catalog without what only writers need: for processes that only read (training).

A table's state is one committed, immutable metadata file; the catalog's part is the pointer to it. pyiceberg's
`SqlCatalog` reads that pointer through SQLAlchemy (~0.25 s to import), and its default FileIO for `file://`
imports pyiceberg.io.pyarrow -> pyarrow.dataset -> pandas (~0.3 s): together about half of what a fresh training
process spends before its first batch once torch is imported. `ReadOnlyCatalog` reads the pointer with the
standard library's sqlite3 from pyiceberg's own `iceberg_tables` table (the Iceberg JDBC catalog layout; the
database opened read-only) and opens the table as a pyiceberg `StaticTable` whose FileIO (`LocalFileIO`) reads
local files with plain `open`. Scans, snapshots, tags and properties are pyiceberg's; nothing can be written
through it. Other catalogs (PostgreSQL, REST, an S3 warehouse) open as usual (`read_only_catalog`).
"""

from __future__ import annotations

import os

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.table import StaticTable

from iceberg_catalog.catalog import CatalogConfig
from iceberg_catalog.metadata_files import NoSuchTable, catalog_pointer, local_path

LOCAL_FILE_IO = f"{__name__}.LocalFileIO"


class ReadOnlyLakehouseError(PermissionError):
    """A write was attempted through a read-only catalog or FileIO."""


class LocalInputFile(InputFile):
    def __init__(self, location: str) -> None:
        super().__init__(location)
        path = local_path(location)
        if path is None:
            raise ValueError(f"LocalFileIO reads local files (file:// or an absolute path), got {location!r}")
        self.path = path

    def __len__(self) -> int:
        return os.path.getsize(self.path)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def open(self, seekable: bool = True):
        return open(self.path, "rb")  # noqa: SIM115 - the caller closes the stream (pyiceberg's InputStream)


class LocalFileIO(FileIO):
    """pyiceberg FileIO over local files that refuses every write."""

    def new_input(self, location: str) -> InputFile:
        return LocalInputFile(location)

    def new_output(self, location: str) -> OutputFile:
        raise ReadOnlyLakehouseError(f"read-only FileIO: refusing to write {location!r}")

    def delete(self, location: str | InputFile | OutputFile) -> None:
        where = location if isinstance(location, str) else location.location
        raise ReadOnlyLakehouseError(f"read-only FileIO: refusing to delete {where!r}")


class ReadOnlyCatalog:
    """`load_table` of an embedded SQLite catalog: the pointer by sqlite3, the table by `StaticTable`."""

    def __init__(self, config: CatalogConfig) -> None:
        self.name = config.name
        self.properties = dict(config.properties)
        self.db = config.sqlite_path
        if self.db is None:
            raise ValueError(f"{config.describe()} is not an embedded SQLite catalog")
        # metadata of a local warehouse is read with LocalFileIO; an S3 warehouse keeps pyiceberg's FileIO
        self._table_properties = (
            {**self.properties, "py-io-impl": LOCAL_FILE_IO}
            if local_path(config.warehouse) is not None
            else self.properties
        )

    def metadata_location(self, identifier: str | tuple[str, ...]) -> str:
        """The table's current metadata file, as the catalog records it."""
        try:
            return catalog_pointer(str(self.db), self.name, identifier)
        except NoSuchTable as exc:
            raise NoSuchTableError(str(exc)) from None

    def load_table(self, identifier: str | tuple[str, ...]) -> StaticTable:
        return StaticTable.from_metadata(self.metadata_location(identifier), self._table_properties)


def read_only_catalog(config: CatalogConfig | None = None):
    """A catalog to read tables from: `ReadOnlyCatalog` for an existing embedded SQLite catalog, else the
    configured pyiceberg catalog (opened without creating anything)."""
    config = config or CatalogConfig.resolve()
    db = config.sqlite_path
    if db is not None and db.is_file():
        return ReadOnlyCatalog(config)
    return config.load()
