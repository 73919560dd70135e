"""The frozen manifest of a run view: canonical bytes, hash, id, samples digest. Pure functions.

The manifest holds everything that defines what a training run reads (pinned input snapshots, tokenizer,
mixture requested and realised, seed, epoch policy, packing, the samples digest, exclusions and the
quarantine report, code and config hashes) and nothing that varies between two builds of the same thing
(no timestamps, no Dagster run ids, no snapshot id of the samples table). Identical inputs and config
therefore give the same bytes, the same sha256 and the same run view id; any change gives a new id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping

FORMAT = "tokenlake.run_view/1"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def canonical_json(manifest: Mapping[str, object]) -> str:
    """The exact text that is stored and hashed: sorted keys, no whitespace, UTF-8."""
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def manifest_sha256(manifest: Mapping[str, object]) -> str:
    return hashlib.sha256(canonical_json(manifest).encode()).hexdigest()


def check_name(name: str) -> str:
    """A run view name becomes part of an id, a tag name and a partition value: keep it plain."""
    if not _NAME.match(name):
        raise ValueError(f"run view name {name!r} must match {_NAME.pattern} (lower case, digits, . _ -)")
    return name


def run_view_id(name: str, sha256: str) -> str:
    """`<name>-<first 12 hex digits of the manifest hash>`: readable, and new whenever anything changes."""
    return f"{check_name(name)}-{sha256[:12]}"


def tag_name(run_view_id: str) -> str:
    """The Iceberg tag that keeps a published view's pinned snapshots readable by time travel."""
    return f"runview-{run_view_id}"


def samples_digest(rows: Iterable[Mapping[str, object]]) -> str:
    """sha256 over the samples in sample_index order (the contract the loader verifies)."""
    h = hashlib.sha256()
    for r in rows:
        h.update(f"{r['sample_index']}\t{r['doc_id']}\t{r['repetition']}\t{r['n_tokens']}\t{r['tokens_sha256']}\n"
                 .encode())
    return h.hexdigest()
