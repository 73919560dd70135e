"""Secrets never travel with a task. A `Lakehouse` or `TaskOutput` pickled for another process (a Ray task, a
process pool) carries its catalog and FileIO properties without secret values; the process that unpickles it
takes them from its own configuration (`iceberg_catalog.catalog.restored`): the catalog file named by its
`TOKENLAKE_CATALOG`, when that names the same catalog, else S3's own credential chain (`AWS_ACCESS_KEY_ID`,
`AWS_PROFILE`, an instance role). Give the nodes that run tasks the same `TOKENLAKE_CATALOG` file (a mounted
secret) or AWS credentials.

This module holds the rules on properties only and imports nothing of the project: the catalog configuration
builds on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

# property names whose values are secrets: never printed, logged, fingerprinted, written to metadata or pickled
SECRET_PROPERTIES = frozenset(
    {"s3.secret-access-key", "s3.session-token", "credential", "token", "client.secret-access-key",
     "client.session-token", "adls.account-key", "gcs.oauth2.token", "rest.signing-secret"}
)  # fmt: skip
# dropped with the secrets: a key id without its secret would stop S3 falling back to its credential chain
PAIRED = {"s3.secret-access-key": "s3.access-key-id", "client.secret-access-key": "client.access-key-id"}
URI_PASSWORD = "uri-password"  # the name `portable` gives a password removed from the catalog URI
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/:@]*):[^@/]*@")


def is_secret(key: str) -> bool:
    return key in SECRET_PROPERTIES or "password" in key or "secret" in key


def redact_uri(uri: str) -> str:
    """`uri` with the password of its userinfo replaced by `***` (postgresql://user:***@host/db)."""
    return _USERINFO.sub(r"\1:***@", uri)


def portable(properties: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The properties without secret values (a URI loses its password), and the names of what was removed."""
    public, removed = {}, []
    for k, v in properties.items():
        if is_secret(k) and v:
            removed.append(k)
        else:
            public[k] = v
    for secret, key_id in PAIRED.items():
        if secret in removed and public.pop(key_id, None) is not None:
            removed.append(key_id)
    uri = str(public.get("uri", ""))
    if _USERINFO.match(uri):
        public["uri"] = _USERINFO.sub(r"\1@", uri)
        removed.append(URI_PASSWORD)
    return public, tuple(sorted(removed))


def same_catalog(public: Mapping[str, str]) -> Callable[[Mapping[str, str]], bool]:
    """A test that local properties name the catalog of `public`: same type, URI (bar password), warehouse."""

    def test(local: Mapping[str, str]) -> bool:
        mine = portable(local)[0]
        return all(str(mine.get(k, "")) == str(public.get(k, "")) for k in ("type", "uri", "warehouse"))

    return test


def same_warehouse(location: str) -> Callable[[Mapping[str, str]], bool]:
    """A test that local properties configure the warehouse holding `location`."""

    def test(local: Mapping[str, str]) -> bool:
        warehouse = str(local.get("warehouse", "")).rstrip("/")
        return bool(warehouse) and location.startswith(warehouse + "/")

    return test
