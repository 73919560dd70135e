"""The run view contract, shared by the pipeline that writes run views and the loader that reads them.

One definition each of: the manifest format name, its canonical JSON and sha256, the run view id, the Iceberg
tag that pins a published view, the samples digest, the statuses and the token dtypes. Dagster-free.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pyarrow as pa

from iceberg_catalog.arrays import string_scalar

FORMAT = "tokenlake.run_view/1"
TAG_PREFIX = "runview-"
STATUSES = ("candidate", "published", "rejected", "superseded")
# stored token arrays are little-endian; the name is recorded per tokenizer and per row
TOKEN_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
SAMPLE_DIGEST_COLUMNS = ("sample_index", "doc_id", "repetition", "n_tokens", "tokens_sha256")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
# identifiers (namespace.name, as catalogs and the manifest's `inputs` name them) of the tables a published view is
# read from; `iceberg_catalog.schemas` declares them by these
MANIFESTS_TABLE = "run_view.manifests"
SAMPLES_TABLE = "run_view.samples"
TOKENS_TABLE = "tokenized.documents"


def canonical_json(manifest: Mapping[str, object]) -> str:
    """The exact text that is stored and hashed: sorted keys, no whitespace, UTF-8."""
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def manifest_sha256(manifest: Mapping[str, object]) -> str:
    return hashlib.sha256(canonical_json(manifest).encode()).hexdigest()


@dataclass(frozen=True)
class Manifest:
    """A run view manifest, read-only: the parts the pipeline and the loader read, typed, plus its canonical JSON.

    `text` is `canonical_json` of the dict it was built from and `to_dict()` parses it back, so the bytes that
    are stored and hashed never come from the typed fields (they cannot drift from what was hashed). Two
    manifests are equal when their hashes are. Parts a manifest may lack (a view built before they existed,
    an in-memory view) are None or empty.
    """

    name: str | None
    tokenizer_id: str
    tokenizer_name: str | None
    token_dtype: str  # "uint16" when the tokenizer does not record one
    inputs: Mapping[str, int | None]  # table identifier -> pinned snapshot id
    seed: int
    epochs: int | None  # None: unbounded
    packing: Mapping[str, object]  # seq_len, eos_id, cross_document_attention
    n_samples: int
    n_tokens: int
    n_documents: int | None  # distinct documents in the samples (None: a manifest that does not record it)
    samples_sha256: str  # `samples_digest` of the samples
    mixture: Mapping[str, object] | None
    realised: tuple[Mapping[str, object], ...]
    quarantine: Mapping[str, object] | None
    split: Mapping[str, object] | None  # present only for a view that selects a split
    policy: Mapping[str, object] | None  # the mixture policy version it was built under, if any
    text: str = field(repr=False)  # canonical_json of the manifest: the bytes stored and hashed
    sha256: str  # manifest_sha256 of the manifest: its run view id is <name>-<first 12 hex digits>

    # what a manifest must hold to be read at all (the loader refuses one without them, naming the key)
    REQUIRED = ("tokenizer", "seed", "packing", "samples", "inputs")

    @classmethod
    def from_dict(cls, manifest: Mapping[str, object]) -> Manifest:
        """The typed manifest of a manifest dict; ValueError names a missing top-level key."""
        for key in cls.REQUIRED:
            if key not in manifest:
                raise ValueError(f"manifest has no {key!r} (format {manifest.get('format')!r})")
        text = canonical_json(manifest)
        m = json.loads(text)  # a private copy: the read-only views below share nothing with the caller
        tokenizer, samples = m["tokenizer"], m["samples"]
        frozen = MappingProxyType
        return cls(
            name=m.get("name"),
            tokenizer_id=tokenizer["tokenizer_id"],
            tokenizer_name=tokenizer.get("name"),
            token_dtype=tokenizer.get("token_dtype", "uint16"),
            inputs=frozen(m["inputs"]),
            seed=m["seed"],
            epochs=(m.get("epoch_policy") or {}).get("epochs"),
            packing=frozen(m["packing"]),
            n_samples=samples["n_samples"],
            n_tokens=samples["n_tokens"],
            n_documents=samples.get("n_documents"),
            samples_sha256=samples["sha256"],
            mixture=None if m.get("mixture") is None else frozen(m["mixture"]),
            realised=tuple(frozen(r) for r in m.get("realised") or ()),
            quarantine=None if m.get("quarantine") is None else frozen(m["quarantine"]),
            split=None if m.get("split") is None else frozen(m["split"]),
            policy=None if m.get("policy") is None else frozen(m["policy"]),
            text=text,
            sha256=hashlib.sha256(text.encode()).hexdigest(),
        )

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """The typed manifest of stored manifest JSON (its hash is checked by the reader, against the row)."""
        return cls.from_dict(json.loads(text))

    @classmethod
    def of(cls, manifest: Manifest | Mapping[str, object]) -> Manifest:
        """`manifest` as is, or built from a dict (what callers holding a manifests row pass)."""
        return manifest if isinstance(manifest, Manifest) else cls.from_dict(manifest)

    def to_dict(self) -> dict:
        """The manifest as a new dict: `canonical_json` of it is `text`, byte for byte."""
        return json.loads(self.text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Manifest) and other.sha256 == self.sha256

    def __hash__(self) -> int:
        return hash(self.sha256)


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
    return f"{TAG_PREFIX}{run_view_id}"


def samples_digest(rows: Iterable[Mapping[str, object]] | pa.Table) -> str:
    """sha256 over the samples in sample_index order: one line `index, doc_id, repetition, n_tokens,
    tokens_sha256` per sample (the digest the manifest freezes and the loader verifies)."""
    h = hashlib.sha256()
    if isinstance(rows, pa.Table):
        update_samples_digest(h, rows)
    else:
        for r in rows:
            h.update(_sample_line(r))
    return h.hexdigest()


def _sample_line(r: Mapping[str, object]) -> bytes:
    return f"{r['sample_index']}\t{r['doc_id']}\t{r['repetition']}\t{r['n_tokens']}\t{r['tokens_sha256']}\n".encode()


def update_samples_digest(h, table: pa.Table) -> None:
    """Feed the lines of `table`'s samples (in its row order) to the running sha256 `h`: a view's digest is the
    same whether its rows arrive as one table or as consecutive pieces. Without nulls the lines are built by
    Arrow and hashed per chunk (the same bytes: integers cast to strings print as str(int))."""
    import pyarrow.compute as pc  # here, not at import: the loader imports this module at start-up

    cols = [table.column(c) for c in SAMPLE_DIGEST_COLUMNS]
    if any(c.null_count for c in cols):  # the per-row path spells nulls as Python does
        for values in zip(*(c.to_pylist() for c in cols), strict=True):
            h.update(_sample_line(dict(zip(SAMPLE_DIGEST_COLUMNS, values, strict=True))))
        return
    if table.num_rows == 0:
        return
    parts = [c.cast(pa.large_string()) for c in cols]
    lines = pc.binary_join_element_wise(*parts, string_scalar("\t"))  # (pa.scalar would import pandas)
    lines = pc.binary_join_element_wise(lines, string_scalar(""), string_scalar("\n"))
    for chunk in lines.chunks:
        offsets = np.frombuffer(chunk.buffers()[1], dtype="<i8", count=len(chunk) + 1, offset=chunk.offset * 8)
        if len(chunk):
            h.update(memoryview(chunk.buffers()[2])[int(offsets[0]) : int(offsets[-1])])


def token_dtype(name: str) -> np.dtype:
    """The numpy dtype of a stored token dtype name, with a clear error for anything else."""
    if name not in TOKEN_DTYPES:
        raise ValueError(f"token_dtype must be one of {sorted(TOKEN_DTYPES)}, got {name!r}")
    return TOKEN_DTYPES[name]


def token_dtype_for_vocab(vocab_size: int) -> str:
    """The narrowest stored dtype that holds every id of a vocabulary."""
    if vocab_size <= 1 << 16:
        return "uint16"
    if vocab_size <= 1 << 32:
        return "uint32"
    raise ValueError(f"vocabulary of {vocab_size} ids does not fit uint32")


# --- the layout of a published view --------------------------------------------------------------------------
# Where each sample's document lies in the pinned token files (file, row group, row) and one sha256 per row group
# over its `tokens` values back to back, computed at publication from bytes verified document by document against
# the samples' tokens_sha256. Stored next to run_view.samples (a blob under its table location, its sha256 and
# path in a table property of run_view.samples), not in the manifest: it names storage paths, which differ
# between two copies of the same catalog, so the run view id (the manifest's hash) stays what it was. The blob
# records the manifest hash and samples digest it was made for; a reader checks both and the blob's sha256.
LAYOUT_FORMAT = "tokenlake.run_view_layout/1"
LAYOUT_PROPERTY_PREFIX = "tokenlake.layout."  # + run view id -> "<sha256 of the blob> <path>"


def layout_property(run_view_id: str) -> str:
    """The run_view.samples table property that points at a view's layout blob."""
    return f"{LAYOUT_PROPERTY_PREFIX}{run_view_id}"


def token_value_bytes(arr: pa.Array) -> tuple[memoryview, np.ndarray]:
    """(the values of a binary array's rows back to back, each row's byte start plus the end): the bytes a row
    group digest is over, without copying them."""
    offsets_buf, data_buf = arr.buffers()[1], arr.buffers()[2]
    width = 8 if pa.types.is_large_binary(arr.type) else 4
    offsets = np.frombuffer(offsets_buf, dtype=f"<i{width}", count=len(arr) + 1, offset=arr.offset * width)
    offsets = offsets.astype(np.int64)
    base = int(offsets[0]) if len(offsets) else 0
    size = int(offsets[-1]) - base if len(offsets) else 0
    data = memoryview(data_buf)[base : base + size] if data_buf is not None else memoryview(b"")
    return data, offsets - base


def row_group_digest(data) -> bytes:
    """sha256 of a row group's token values back to back (32 raw bytes)."""
    return hashlib.sha256(data).digest()


class ViewLayout:
    """A view's layout: token files (sorted paths), per sample (file index, row group, row), and per row group the
    view reads (file index, row group, sha256 of its token values; rows whose documents did not verify at
    publication have no digest: they are read document by document)."""

    def __init__(
        self,
        manifest_sha256: str,
        samples_sha256: str,
        files,
        file_index,
        row_group,
        row,
        group_file,
        group_row_group,
        group_sha256,
    ):
        self.manifest_sha256, self.samples_sha256 = manifest_sha256, samples_sha256
        self.files = tuple(files)
        self.file_index, self.row_group, self.row = (np.asarray(a, "<i4") for a in (file_index, row_group, row))
        self.group_file = np.asarray(group_file, "<i4")
        self.group_row_group = np.asarray(group_row_group, "<i4")
        self.group_sha256 = np.asarray(group_sha256, "S32")

    def group_digests(self) -> dict[int, bytes]:
        """{file index << 32 | row group: sha256} (the loader's row-group keys)."""
        keys = (self.group_file.astype(np.int64) << 32) | self.group_row_group.astype(np.int64)
        return dict(zip(keys.tolist(), self.group_sha256.tolist(), strict=True))

    def encode(self) -> bytes:
        """JSON header line, then int32 file_index, row_group, row (per sample), group file, group row group (per
        group) and the groups' 32-byte digests, little-endian."""
        header = {
            "format": LAYOUT_FORMAT,
            "manifest_sha256": self.manifest_sha256,
            "samples_sha256": self.samples_sha256,
            "files": list(self.files),
            "n_samples": len(self.row),
            "n_groups": len(self.group_sha256),
        }
        parts = [self.file_index, self.row_group, self.row, self.group_file, self.group_row_group]
        body = b"".join(np.ascontiguousarray(p, "<i4").tobytes() for p in parts) + self.group_sha256.tobytes()
        return canonical_json(header).encode() + b"\n" + body

    @classmethod
    def decode(cls, blob: bytes) -> ViewLayout:
        """The layout of `encode`'s bytes; ValueError names what is wrong."""
        head, sep, body = blob.partition(b"\n")
        try:
            header = json.loads(head)
        except ValueError as e:
            raise ValueError(f"layout header is not JSON: {e}") from e
        if not sep or header.get("format") != LAYOUT_FORMAT:
            raise ValueError(f"layout format {header.get('format')!r}, expected {LAYOUT_FORMAT}")
        n, g = int(header["n_samples"]), int(header["n_groups"])
        if len(body) != 12 * n + 8 * g + 32 * g:
            raise ValueError(f"layout body holds {len(body)} bytes, {n} samples and {g} groups need {12 * n + 40 * g}")
        ints = np.frombuffer(body, "<i4", count=3 * n + 2 * g)
        digests = np.frombuffer(body, "S32", count=g, offset=4 * (3 * n + 2 * g))
        return cls(
            header["manifest_sha256"],
            header["samples_sha256"],
            header["files"],
            ints[:n],
            ints[n : 2 * n],
            ints[2 * n : 3 * n],
            ints[3 * n : 3 * n + g],
            ints[3 * n + g :],
            digests,
        )


def locate_documents(
    sample_doc_ids: pa.Array | pa.ChunkedArray, per_file: Sequence[tuple[pa.ChunkedArray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(file index, row group, row) of each sample's document, given per file (in file order) its doc_id column
    and its rows per row group; plus the doc ids found in no file (sorted, empty when all are found)."""
    import pyarrow.compute as pc

    ids, fi_parts, rg_parts, row_parts = [], [], [], []
    for fi, (col, counts) in enumerate(per_file):
        counts = np.asarray(counts, np.int64)
        ids.extend(col.chunks if isinstance(col, pa.ChunkedArray) else [col])
        fi_parts.append(np.full(int(counts.sum()), fi, np.int32))
        rg_parts.append(np.repeat(np.arange(len(counts), dtype=np.int32), counts))
        first_row = np.repeat(np.cumsum(counts) - counts, counts)
        row_parts.append((np.arange(int(counts.sum())) - first_row).astype(np.int32))
    all_ids = pa.concat_arrays([c.cast(pa.large_string()) for c in ids]) if ids else pa.array([], pa.large_string())
    at = pc.index_in(sample_doc_ids.cast(pa.large_string()), value_set=all_ids)
    if at.null_count:
        missing = sorted(set(pc.filter(sample_doc_ids, pc.is_null(at)).to_pylist()))
        return np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32), missing
    pos = at.to_numpy()
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int32)  # noqa: E731
    return cat(fi_parts)[pos], cat(rg_parts)[pos], cat(row_parts)[pos], []
