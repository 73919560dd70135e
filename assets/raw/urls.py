"""URL normalisation and the deletion key: the stable handle a takedown request is matched by."""

from __future__ import annotations

import hashlib
from urllib.parse import SplitResult, quote, unquote, urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalise_url(url: str) -> str:
    """Canonical form of a URL: lower-case scheme and host, no default port, no fragment, no empty query,
    '/' for an empty path, percent-encoding normalised. Non-hierarchical URIs (dns:, urn:) only lose
    surrounding whitespace and get a lower-case scheme."""
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    scheme = parts.scheme.lower()
    if not parts.netloc:
        return f"{scheme}:{parts.path}" if scheme else url
    host = (parts.hostname or "").rstrip(".")
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    path = quote(unquote(parts.path), safe="/:@!$&'()*+,;=-._~") or "/"
    query = quote(unquote(parts.query), safe="/:@!$&'()*+,;=-._~?")
    return SplitResult(scheme, netloc, path, query, "").geturl()


def deletion_key(url: str) -> str:
    """sha256 (hex) of the normalised URL."""
    return hashlib.sha256(normalise_url(url).encode("utf-8")).hexdigest()


def url_host(url: str) -> str | None:
    """Lower-case host of a URL, or None for URIs without one."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return None
    return host.rstrip(".") if host else None
