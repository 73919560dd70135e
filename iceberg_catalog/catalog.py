"""Catalog configuration: the embedded default (SQLite + local warehouse) or any pyiceberg catalog.

Selection is configuration only, no code change:
1. explicit properties (the Dagster resource's `properties`), else
2. a YAML/JSON file named by `TOKENLAKE_CATALOG` (`{name: ..., properties: {type: rest, uri: ...}}`), else
3. the embedded default under `TOKENLAKE_HOME` (default `./.tokenlake`): `catalog.db` + `warehouse/`.
The properties go unchanged to `pyiceberg.catalog.load_catalog`, so PostgreSQL (`type: sql,
uri: postgresql+psycopg2://...`), REST, Glue and an S3 warehouse are all just properties. An S3 warehouse
(`warehouse: s3://BUCKET/PATH`) takes pyiceberg's FileIO properties `s3.endpoint`, `s3.access-key-id`,
`s3.secret-access-key`, `s3.region` and `s3.force-virtual-addressing` (`false`, the default: path-style, as
MinIO and SeaweedFS want). `CatalogConfig.check()` proves the catalog answers and the warehouse bucket exists
and takes the credentials, naming the wrong value, before any work starts.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from iceberg_catalog.credentials import SECRET_PROPERTIES, URI_PASSWORD, portable, redact_uri, restored, same_catalog

if TYPE_CHECKING:  # pyiceberg and the schemas are imported where used: `CatalogConfig` alone imports neither (the
    # loader resolves its catalog and reads an embedded one without pyiceberg, iceberg_catalog.metadata_files)
    from pyiceberg.catalog import Catalog

    from iceberg_catalog.schemas import TableDef

DEFAULT_CATALOG_NAME = "tokenlake"
CHECK_TIMEOUT_S = 10.0


class CatalogConfigError(ValueError):
    """The catalog configuration cannot work (unreachable catalog, missing bucket, wrong credentials)."""


def redacted(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties with secret values (and a URI's password) replaced by `***`: safe to print."""
    out = {}
    for k, v in properties.items():
        if k in SECRET_PROPERTIES or "password" in k or "secret" in k:
            out[k] = "***"
        else:
            out[k] = redact_uri(v) if isinstance(v, str) else v
    return out


def tokenlake_home() -> Path:
    """The data directory holding the embedded catalog, the warehouse and Dagster's storage."""
    return Path(os.environ.get("TOKENLAKE_HOME", ".tokenlake")).resolve()


@dataclass(frozen=True)
class CatalogConfig:
    """A catalog name plus the pyiceberg properties that open it."""

    name: str = DEFAULT_CATALOG_NAME
    properties: Mapping[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = field(default=(), compare=False)  # secrets that did not travel (see __reduce__)

    def __reduce__(self):
        """Pickled without secrets; the unpickling process fills them in from its own configuration
        (`iceberg_catalog.credentials`)."""
        public, removed = portable(self.properties)
        return (_unpickle_config, (self.name, public, removed))

    @classmethod
    def embedded(cls, home: Path | str | None = None) -> CatalogConfig:
        """The one-machine default: pyiceberg SqlCatalog on SQLite plus a file warehouse under `home`."""
        root = Path(home).resolve() if home is not None else tokenlake_home()
        return cls(
            DEFAULT_CATALOG_NAME,
            {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": (root / "warehouse").as_uri()},
        )

    @classmethod
    def resolve(cls, name: str | None = None, properties: Mapping[str, str] | None = None) -> CatalogConfig:
        """Pick the configuration by the precedence in the module docstring."""
        if properties:
            return cls(name or DEFAULT_CATALOG_NAME, dict(properties))
        path = os.environ.get("TOKENLAKE_CATALOG")
        if path:
            return cls.from_file(path)
        return cls.embedded()

    @classmethod
    def from_file(cls, path: str | Path) -> CatalogConfig:
        """Read `{name, properties}` from a YAML or JSON file."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"TOKENLAKE_CATALOG points to {str(p)!r}, which is not a file")
        import yaml

        doc = yaml.safe_load(p.read_text()) or {}
        props = doc.get("properties")
        if not isinstance(props, dict) or not props:
            raise ValueError(f"catalog file {str(p)!r} needs a non-empty 'properties' mapping, got {props!r}")
        return cls(str(doc.get("name", DEFAULT_CATALOG_NAME)), {str(k): str(v) for k, v in props.items()})

    @property
    def is_embedded_sqlite(self) -> bool:
        return self.properties.get("type") == "sql" and str(self.properties.get("uri", "")).startswith("sqlite")

    @property
    def sqlite_path(self) -> Path | None:
        """The database file of an embedded SQLite catalog (None for any other catalog, in-memory included)."""
        uri = str(self.properties.get("uri", ""))
        if not self.is_embedded_sqlite or not uri.startswith("sqlite:///"):
            return None
        rest = uri.removeprefix("sqlite:///").split("?", 1)[0]
        return None if not rest or rest.startswith(":memory:") else Path(rest)

    @property
    def warehouse(self) -> str:
        return str(self.properties.get("warehouse", ""))

    def fingerprint(self) -> str:
        """A stable description used to key per-table commit locks (never contains secrets' values: the URI's
        password is redacted)."""
        return json.dumps(
            {"name": self.name, "uri": redact_uri(str(self.properties.get("uri", ""))), "warehouse": self.warehouse},
            sort_keys=True,
        )

    def describe(self) -> str:
        """One line for logs and errors, without secrets."""
        return f"catalog {self.name!r} {json.dumps(redacted(self.properties), sort_keys=True)}"

    def check(self) -> None:
        """Fail fast with a `CatalogConfigError` naming the wrong value: the catalog URI unreachable, the S3
        warehouse bucket missing, the S3 or catalog credentials refused. Opens the catalog (creates no namespace
        or table)."""
        kind = self.properties.get("type", "")
        if kind == "sql" and not self.is_embedded_sqlite:
            _check_sql(str(self.properties.get("uri", "")))
        elif kind == "rest":
            _check_rest(str(self.properties.get("uri", "")))
        if self.warehouse.startswith(("s3://", "s3a://")):
            _check_bucket(self.properties, kind == "rest")
        try:
            catalog = self.load()
            catalog.list_namespaces()
        except CatalogConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - name what was configured, not the library's trace
            raise CatalogConfigError(
                f"{self.describe()}: opening the catalog failed: {type(exc).__name__}: {_scrub(str(exc), self)}"
            ) from None

    def load(self) -> Catalog:
        """Open the catalog (creating the embedded directories when needed)."""
        from pyiceberg.catalog import load_catalog

        if URI_PASSWORD in self.missing or {"credential", "token"} & set(self.missing):
            raise CatalogConfigError(
                f"{self.describe()}: its {', '.join(self.missing)} did not travel with this task (secrets never do): "
                f"give the nodes that run tasks a TOKENLAKE_CATALOG file naming the same catalog"
            )
        if self.is_embedded_sqlite:
            if self.sqlite_path is not None:
                self.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
            wh = str(self.properties.get("warehouse", ""))
            if wh.startswith("file://"):
                Path(wh.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        for attempt in range(1, CREATE_RACE_ATTEMPTS):
            try:
                return load_catalog(self.name, **self.properties)
            except Exception as exc:  # noqa: BLE001 - only the first-open race is retried
                if not _lost_create_race(exc):
                    raise
                time.sleep(0.2 * attempt)
        return load_catalog(self.name, **self.properties)


CREATE_RACE_ATTEMPTS = 5


def _lost_create_race(exc: Exception) -> bool:
    """Two processes opening a fresh SQL catalog at once both create pyiceberg's own tables; the loser gets a
    duplicate-key or already-exists error from the database. Opening again then finds the tables."""
    text = str(exc).lower()
    return type(exc).__name__ in ("IntegrityError", "ProgrammingError") and (
        "duplicate key" in text or "already exists" in text
    )


def _scrub(text: str, config: CatalogConfig) -> str:
    """`text` with every secret value of `config` replaced by `***`."""
    for k, v in config.properties.items():
        if (k in SECRET_PROPERTIES or "password" in k or "secret" in k) and v:
            text = text.replace(str(v), "***")
        if isinstance(v, str) and "://" in v:
            text = text.replace(v, redact_uri(v))
    return text


def _check_sql(uri: str) -> None:
    """Connect once to a SQL catalog database (PostgreSQL: connect timeout), naming the redacted URI."""
    import sqlalchemy

    args = {"connect_timeout": int(CHECK_TIMEOUT_S)} if uri.startswith("postgresql") else {}
    try:
        engine = sqlalchemy.create_engine(uri, connect_args=args, poolclass=sqlalchemy.pool.NullPool)
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("select 1"))
    except Exception as exc:  # noqa: BLE001
        msg = str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        password = sqlalchemy.engine.make_url(uri).password if "://" in uri else None
        if password:
            msg = msg.replace(password, "***")
        raise CatalogConfigError(
            f"catalog uri {redact_uri(uri)!r} is unreachable or refused the login: {msg}"
        ) from None


def _check_rest(uri: str) -> None:
    """GET `{uri}/v1/config`: any HTTP answer proves the REST catalog is reachable (credentials come later)."""
    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/v1/config", timeout=CHECK_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return
    except Exception as exc:  # noqa: BLE001
        raise CatalogConfigError(f"catalog uri {redact_uri(uri)!r} is unreachable: {exc}") from None


def s3_client(properties: Mapping[str, str]):
    """A boto3 S3 client from pyiceberg's `s3.*` properties (path-style unless s3.force-virtual-addressing)."""
    import boto3
    from botocore.config import Config

    virtual = str(properties.get("s3.force-virtual-addressing", "false")).lower() == "true"
    return boto3.client(
        "s3",
        endpoint_url=properties.get("s3.endpoint") or None,
        aws_access_key_id=properties.get("s3.access-key-id") or None,
        aws_secret_access_key=properties.get("s3.secret-access-key") or None,
        aws_session_token=properties.get("s3.session-token") or None,
        region_name=properties.get("s3.region") or None,
        config=Config(
            s3={"addressing_style": "virtual" if virtual else "path"},
            connect_timeout=CHECK_TIMEOUT_S,
            read_timeout=CHECK_TIMEOUT_S,
            retries={"max_attempts": 2},
        ),
    )


def _check_bucket(properties: Mapping[str, str], rest: bool) -> None:
    """HEAD the warehouse bucket: 404 names the bucket, 403 names the access key id (never the secret)."""
    from botocore.exceptions import ClientError, EndpointConnectionError

    warehouse = str(properties["warehouse"])
    bucket = warehouse.split("://", 1)[1].split("/", 1)[0]
    endpoint = properties.get("s3.endpoint", "(AWS default)")
    try:
        s3_client(properties).head_bucket(Bucket=bucket)
    except EndpointConnectionError as exc:
        raise CatalogConfigError(f"s3.endpoint {endpoint!r} is unreachable: {exc}") from None
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404 or code in ("404", "NoSuchBucket"):
            if rest:  # a REST catalog's warehouse may name a catalog-side table bucket, not a plain S3 bucket
                return
            raise CatalogConfigError(
                f"warehouse {warehouse!r}: bucket {bucket!r} does not exist at s3.endpoint {endpoint!r}"
            ) from None
        if status in (401, 403) or code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            raise CatalogConfigError(
                f"s3.access-key-id {properties.get('s3.access-key-id', '')!r} with the configured "
                f"s3.secret-access-key was refused for bucket {bucket!r} at s3.endpoint {endpoint!r} ({code or status})"
            ) from None
        raise CatalogConfigError(f"warehouse {warehouse!r} at s3.endpoint {endpoint!r}: {code} {exc}") from None


class SchemaMismatch(RuntimeError):
    """A table in the catalog does not have the schema declared in iceberg_catalog/schemas.py."""


def _add_declared_columns(existing, t: TableDef) -> bool:
    """Migrate a table made by an older version: when the declaration only appends optional primitive columns
    whose declared field ids are the ones Iceberg will assign next, add them (old rows read them as null) and
    return True; anything else is not a migration this can make (False)."""
    have = {f.field_id: f for f in existing.schema().fields}
    added = [f for f in t.schema.fields if f.field_id not in have]
    kept = [f for f in t.schema.fields if f.field_id in have]
    if not added or len(kept) != len(have) or any(have[f.field_id] != f for f in kept):
        return False
    next_id = existing.metadata.last_column_id + 1
    if [f.field_id for f in added] != list(range(next_id, next_id + len(added))):
        return False
    if any(f.required or not f.field_type.is_primitive for f in added):
        return False
    with existing.update_schema() as update:
        for f in added:
            update.add_column(f.name, f.field_type, doc=f.doc)
    return existing.refresh().schema().as_struct() == t.schema.as_struct()


def ensure_tables(catalog: Catalog, tables: Iterable[TableDef] | None = None) -> None:
    """Create every namespace and any missing table (`tables`: all of iceberg_catalog.schemas by default); add
    the optional columns a newer declaration appends (`_add_declared_columns`); refuse an existing table whose
    schema differs otherwise from its declaration (field ids, names, types), since data files are written by
    declared field id."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

    from iceberg_catalog.schemas import NAMESPACES, TABLES

    tables = TABLES.values() if tables is None else tables
    for ns in NAMESPACES:
        try:
            catalog.create_namespace(ns)
        except NamespaceAlreadyExistsError:
            pass
        except Exception as exc:  # noqa: BLE001 - another process created it between check and insert
            if not _lost_create_race(exc):
                raise
    from iceberg_catalog.lakehouse import check_location  # the location guard, before anything is written

    for t in tables:
        try:
            existing = catalog.load_table(t.identifier)
            check_location(t, existing.location(), str(catalog.properties.get("warehouse", "")))
        except NoSuchTableError:
            try:
                catalog.create_table(
                    t.identifier, schema=t.schema, partition_spec=t.partition_spec, properties=t.properties
                )
            except TableAlreadyExistsError:  # another process won the race: fine
                pass
            except Exception as exc:  # noqa: BLE001 - the same race, seen by the database
                if not _lost_create_race(exc):
                    raise
            continue
        if existing.schema().as_struct() != t.schema.as_struct() and not _add_declared_columns(existing, t):
            declared = {f.field_id: (f.name, str(f.field_type)) for f in t.schema.fields}
            actual = {f.field_id: (f.name, str(f.field_type)) for f in existing.schema().fields}
            diff = sorted(set(declared.items()) ^ set(actual.items()))[:6]
            raise SchemaMismatch(
                f"table {t.identifier} in the catalog differs from its declaration (first differences by field id: "
                f"{diff}); migrate it with table.update_schema() or drop it (embedded default: delete "
                f"TOKENLAKE_HOME) and re-materialise"
            )


def open_catalog(config: CatalogConfig | None = None, *, create: bool = True) -> Catalog:
    """Open the configured catalog and, unless `create=False`, make sure namespaces and tables exist."""
    catalog = (config or CatalogConfig.resolve()).load()
    if create:
        ensure_tables(catalog)
    return catalog


def _unpickle_config(name: str, public: Mapping[str, str], removed: tuple[str, ...]) -> CatalogConfig:
    properties, missing = restored(public, removed, same_catalog(public))
    return CatalogConfig(name, properties, missing)
