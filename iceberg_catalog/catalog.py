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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from iceberg_catalog.credentials import URI_PASSWORD, is_secret, portable, redact_uri, same_catalog

if TYPE_CHECKING:  # pyiceberg is imported where used: `CatalogConfig` alone does not import it (the loader
    # resolves its catalog and reads an embedded one without pyiceberg, iceberg_catalog.metadata_files)
    from pyiceberg.catalog import Catalog

DEFAULT_CATALOG_NAME = "tokenlake"
CHECK_TIMEOUT_S = 10.0


class CatalogConfigError(ValueError):
    """The catalog configuration cannot work (unreachable catalog, missing bucket, wrong credentials)."""


def redacted(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties with secret values (and a URI's password) replaced by `***`: safe to print."""
    out = {}
    for k, v in properties.items():
        if is_secret(k):
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
                if not lost_create_race(exc):
                    raise
                time.sleep(0.2 * attempt)
        return load_catalog(self.name, **self.properties)


CREATE_RACE_ATTEMPTS = 5


def lost_create_race(exc: Exception) -> bool:
    """Two processes opening a fresh SQL catalog at once both create pyiceberg's own tables; the loser gets a
    duplicate-key or already-exists error from the database. Opening again then finds the tables."""
    text = str(exc).lower()
    return type(exc).__name__ in ("IntegrityError", "ProgrammingError") and (
        "duplicate key" in text or "already exists" in text
    )


def _scrub(text: str, config: CatalogConfig) -> str:
    """`text` with every secret value of `config` replaced by `***`."""
    for k, v in config.properties.items():
        if is_secret(k) and v:
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


def _unpickle_config(name: str, public: Mapping[str, str], removed: tuple[str, ...]) -> CatalogConfig:
    properties, missing = restored(public, removed, same_catalog(public))
    return CatalogConfig(name, properties, missing)


def restored(
    public: Mapping[str, str], removed: tuple[str, ...], same: Callable[[Mapping[str, str]], bool]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """In the process that unpickled `public`: this process's own catalog properties when `same(them)`, else
    `public` as it is; with the names of the secrets still missing (none when nothing was removed)."""
    if not removed:
        return dict(public), ()
    try:
        local = CatalogConfig.resolve()
    except (OSError, ValueError):
        local = None
    if local is not None and same(local.properties):
        return dict(local.properties), ()
    return dict(public), removed
