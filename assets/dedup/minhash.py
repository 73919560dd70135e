"""MinHash signatures of word 5-grams and LSH band hashes (FineWeb settings): pure functions of (text, params),
the same on every machine. Why these choices, and the limits: assets/dedup/README.md. No Dagster here."""

from __future__ import annotations

import codecs
import functools
import hashlib
import operator
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from assets.knobs import knob

# The permutation scheme is part of the stored format: a different scheme gives different signatures, so it
# is pinned here rather than left to datasketch's default.
SCHEME = "affine32"
SIGNATURE_DTYPE = np.dtype("<u4")
_EMPTY_VALUE = np.uint32(0xFFFFFFFF)  # datasketch's initial value: no shingle was ever hashed


@dataclass(frozen=True)
class MinHashParams:
    """MinHash-LSH settings; the defaults are FineWeb's (datatrove `MinhashConfig`): 5-grams, 14 bands x 8 rows."""

    n_grams: int = knob(5, "words per shingle (word n-grams of the normalised text)")
    bands: int = knob(14, "LSH bands: documents sharing one band's hash become candidate pairs")
    rows: int = knob(8, "signature rows per band (a signature has bands * rows values)")
    seed: int = knob(1, "seed of the MinHash permutations")

    @property
    def num_perm(self) -> int:
        """Signature length: one MinHash value per row of every band."""
        return self.bands * self.rows

    def __post_init__(self) -> None:
        for name in ("n_grams", "bands", "rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"MinHashParams.{name} must be >= 1, got {getattr(self, name)}")


DEFAULT_PARAMS = MinHashParams()

# --- normalisation and shingles ---------------------------------------------------------------------------

_NON_WORD = re.compile(r"[\W_]+")  # words are runs of letters and digits in any script; all else separates
_DIGITS = re.compile(r"\d+")
_ZERO_RUNS = re.compile(rb"00+")
_SPACE_RUNS = re.compile(rb"  +")

# ASCII bytes after normalisation: letters lower-cased, digits -> "0", everything else -> space; bytes >= 0x80
# (inside already-normalised non-ASCII words) pass through. The apostrophe is deleted by `translate`.
_ASCII_TABLE = bytes(
    (ord(chr(c).lower()) if chr(c).isalpha() else ord("0") if chr(c).isdigit() else ord(" ")) if c < 128 else c
    for c in range(256)
)


def _normalise_non_ascii(run: str) -> str:
    # NFKD then drop nonspacing marks (datatrove drops category "Mn" too), then the rules of the ASCII table.
    # Applied to non-ASCII runs only: ASCII characters are their own NFKD, so the rest of the text skips the
    # per-character work.
    folded = "".join(c for c in unicodedata.normalize("NFKD", run) if unicodedata.category(c) != "Mn")
    folded = folded.replace("'", "").replace("\u2019", "")  # "don’t" -> "dont", as datatrove
    return _NON_WORD.sub(" ", _DIGITS.sub("0", folded.lower()))


def _encode_non_ascii(err: UnicodeError) -> tuple[bytes, int]:
    # Error handler of the ASCII encoder: it gets each maximal run of non-ASCII characters, while the ASCII
    # text in between is copied in C (3x faster than finding the runs with a regex).
    run = err.object[err.start : err.end]
    return (_normalise_short_run(run) if len(run) <= 8 else _normalise_non_ascii(run).encode()), err.end


@functools.lru_cache(maxsize=1 << 14)
def _normalise_short_run(run: str) -> bytes:
    # Real text repeats the same few short runs (dashes, quotes, accented letters); long runs (whole words of
    # other scripts) are rarely repeated and would make the cache big.
    return _normalise_non_ascii(run).encode()


_ENCODE_ERRORS = "tokenlake.minhash"
codecs.register_error(_ENCODE_ERRORS, _encode_non_ascii)


def _normalised(text: str) -> bytes:
    # UTF-8 of normalise_for_minhash(text); bytes because hashing and shingling work on bytes.
    data = text.encode("ascii", _ENCODE_ERRORS).translate(_ASCII_TABLE, b"'")
    if b"00" in data:
        data = _ZERO_RUNS.sub(b"0", data)
    if b"  " in data:
        data = _SPACE_RUNS.sub(b" ", data)
    return data.strip(b" ")


def normalise_for_minhash(text: str) -> str:
    """Text as MinHash sees it: NFKD without diacritics, lower case, apostrophes dropped, other punctuation and
    symbols -> space, digit runs -> "0", single spaces. Like datatrove's `simplify_text`, except that punctuation
    other than apostrophes becomes a space (so "well-known" gives the two words of "well known") instead of
    being deleted."""
    return _normalised(text).decode()


def shingles(text: str, n: int = 5) -> list[bytes]:
    """Word n-grams of the normalised text as UTF-8 bytes, in order (repeats kept). A document with fewer than
    n words gives one shingle of all its words; an empty one gives none."""
    norm = _normalised(text)
    if not norm:
        return []
    words = norm.split(b" ")
    if len(words) < n:
        return [norm]
    return [b" ".join(gram) for gram in zip(*(words[i:] for i in range(n)))]


# --- shingle hashes -----------------------------------------------------------------------------------------
#
# A shingle's hash is computed from its words, vectorised over a whole batch of documents: each word's bytes
# get a polynomial hash mod 2^64 (base _P_BYTE, plus its length) and the splitmix64 finaliser; the shingle's
# words get the same treatment (base _P_WORD, plus the word count); the top 32 bits are the value MinHash
# permutes. Polynomial hashes of many segments of one array come from one prefix sum: with Q = P^-1 mod 2^64,
# S[j] = sum_{i<j} x_i Q^(i+1), and the segment [s, e) hashes to (S[e] - S[s]) P^e = sum x_i P^(e-1-i).
# Each word occurrence is hashed once however many shingles contain it; nothing is joined or hashed per shingle
# in Python, so datasketch's permutations and minima (`update_batch`) are most of the remaining cost.

_U64 = np.uint64
_P_BYTE = 0x9E3779B97F4A7C15  # odd, so invertible mod 2^64
_P_WORD = 0xC2B2AE3D27D4EB4F
_SHIFT_30, _SHIFT_27, _SHIFT_31, _SHIFT_32 = _U64(30), _U64(27), _U64(31), _U64(32)
_MIX_1, _MIX_2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_CHUNK_BYTES = 1 << 18  # signatures() hashes documents in chunks of about this much normalised text


class _Powers:
    """P^j and (P^-1)^j mod 2^64 for j = 0..n, grown by doubling as longer inputs arrive."""

    def __init__(self, base: int) -> None:
        self.base, self.inverse = _U64(base), _U64(pow(base, -1, 1 << 64))
        self.tables = (self._table(self.base, 1), self._table(self.inverse, 1))

    @staticmethod
    def _table(x: np.uint64, n: int) -> np.ndarray:
        table = np.full(n + 1, x, dtype=_U64)
        table[0] = 1
        return np.cumprod(table)  # uint64 arithmetic wraps: exactly the powers mod 2^64

    def __call__(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        tables = self.tables  # replaced whole, never mutated: safe to share between threads
        if len(tables[0]) <= n:
            size = max(n, 2 * len(tables[0]))
            tables = self.tables = (self._table(self.base, size), self._table(self.inverse, size))
        return tables


_BYTE_POWERS = _Powers(_P_BYTE)
_WORD_POWERS = _Powers(_P_WORD)


def _mix64(x: np.ndarray) -> np.ndarray:
    # splitmix64's finaliser: a bijection on 64 bits in which every input bit affects every output bit
    x = x ^ (x >> _SHIFT_30)
    x *= _MIX_1
    x ^= x >> _SHIFT_27
    x *= _MIX_2
    x ^= x >> _SHIFT_31
    return x


def _segment_hashes(values: np.ndarray, starts: np.ndarray, ends: np.ndarray, powers: _Powers) -> np.ndarray:
    """mix64(polynomial hash * P + length) of each segment values[starts[k]:ends[k]] (uint64 arithmetic)."""
    up, down = powers(len(values))
    prefix = np.zeros(len(values) + 1, dtype=_U64)
    np.cumsum(values * down[1 : len(values) + 1], out=prefix[1:])
    h = (prefix[ends] - prefix[starts]) * up[ends]
    h *= powers.base
    h += (ends - starts).astype(_U64)
    return _mix64(h)


def _word_hashes(text: bytes) -> np.ndarray:
    """Hashes of the words of `text`, which is split at every b" " (so "a  b" has an empty middle word)."""
    data = np.frombuffer(text, dtype=np.uint8)
    spaces = np.flatnonzero(data == 32)
    starts = np.empty(len(spaces) + 1, dtype=np.intp)
    starts[0] = 0
    starts[1:] = spaces + 1
    ends = np.empty_like(starts)
    ends[:-1] = spaces
    ends[-1] = len(data)
    return _segment_hashes(data, starts, ends, _BYTE_POWERS)


def byte_string_hashes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """64-bit hashes (uint64) of the byte strings data[starts[k]:ends[k]]: the word hash above, stable across
    machines and runs (the near-dedup shuffle partitions document keys by it)."""
    return _segment_hashes(data, starts, ends, _BYTE_POWERS)


def _gram_hashes(word_hashes: np.ndarray, first: np.ndarray, n_words: np.ndarray) -> np.ndarray:
    """32-bit hashes of the shingles made of word_hashes[first[k] : first[k] + n_words[k]]."""
    h = _segment_hashes(word_hashes, first, first + n_words, _WORD_POWERS)
    return (h >> _SHIFT_32).astype(np.uint32)


def shingle_hashes(shingle_list: Iterable[bytes]) -> np.ndarray:
    """The 32-bit values MinHash permutes, one per shingle (uint32 array, in order): see the notes above."""
    shingle_list = list(shingle_list)
    if not shingle_list:
        return np.empty(0, dtype=np.uint32)
    # Joined with b" ", every shingle's words are consecutive words of the whole.
    n_words = np.fromiter((s.count(b" ") + 1 for s in shingle_list), dtype=np.intp, count=len(shingle_list))
    first = np.zeros(len(shingle_list), dtype=np.intp)
    np.cumsum(n_words[:-1], out=first[1:])
    return _gram_hashes(_word_hashes(b" ".join(shingle_list)), first, n_words)


def _document_shingle_hashes(norms: Sequence[bytes], n: int) -> list[np.ndarray]:
    """Shingle hashes of each normalised document: the hashes of shingles(text, n), computed in one pass."""
    out = [np.empty(0, dtype=np.uint32)] * len(norms)
    kept = [k for k, norm in enumerate(norms) if norm]
    if not kept:
        return out
    n_words = np.fromiter((norms[k].count(b" ") + 1 for k in kept), dtype=np.intp, count=len(kept))
    word_offset = np.zeros(len(kept), dtype=np.intp)
    np.cumsum(n_words[:-1], out=word_offset[1:])
    n_shingles = np.maximum(n_words - (n - 1), 1)  # a short document is one shingle of all its words
    bounds = np.zeros(len(kept) + 1, dtype=np.intp)
    np.cumsum(n_shingles, out=bounds[1:])
    # shingle j of document d starts at word word_offset[d] + j
    first = np.arange(bounds[-1], dtype=np.intp) + np.repeat(word_offset - bounds[:-1], n_shingles)
    width = np.repeat(np.minimum(n_words, n), n_shingles)
    hashes = _gram_hashes(_word_hashes(b" ".join(norms[k] for k in kept)), first, width)
    for k, part in zip(kept, np.split(hashes, bounds[1:-1])):
        out[k] = part
    return out


# --- signatures ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _minhash_class() -> type:
    """datasketch's MinHash, imported on first use: it pulls in scipy (~0.5 CPU s), which processes that only
    import the asset definitions (curate's) never need."""
    import datasketch

    if int(datasketch.__version__.split(".")[0]) < 2:  # pragma: no cover - depends on the installed package
        raise ImportError(
            f"assets.dedup.minhash needs datasketch>=2.0 (its 'affine32' MinHash scheme); found "
            f"{datasketch.__version__}. Upgrade with `pip install 'datasketch>=2,<3'`: older versions give "
            "different signatures, so stored band hashes would no longer match."
        )
    return datasketch.MinHash


@functools.lru_cache(maxsize=8)
def _permutations(num_perm: int, seed: int) -> np.ndarray:
    perms = _minhash_class()(num_perm=num_perm, seed=seed, scheme=SCHEME).permutations
    perms.setflags(write=False)  # shared by every MinHash built from these params
    return perms


def _minhash_kwargs(params: MinHashParams) -> dict:
    # The values given to datasketch are already hashes: its hashfunc only checks that each is an integer.
    return {
        "num_perm": params.num_perm,
        "seed": params.seed,
        "hashfunc": operator.index,
        "permutations": _permutations(params.num_perm, params.seed),
        "scheme": SCHEME,
    }


def _signatures_of_hashes(hash_arrays: Iterable[np.ndarray], params: MinHashParams) -> list[np.ndarray]:
    # datasketch's batch API does the permutations and minima: one update_batch per document
    return [
        m.hashvalues.astype(SIGNATURE_DTYPE, copy=False)
        for m in _minhash_class().bulk((h.tolist() for h in hash_arrays), **_minhash_kwargs(params))
    ]


def signature_of_shingles(shingle_list: Iterable[bytes], params: MinHashParams = DEFAULT_PARAMS) -> np.ndarray:
    """MinHash signature (uint32, length bands*rows) of already-made shingles, in one `update_batch` call."""
    return _signatures_of_hashes([shingle_hashes(shingle_list)], params)[0]


def signatures(texts: Iterable[str], params: MinHashParams = DEFAULT_PARAMS) -> np.ndarray:
    """Signatures of many documents as a (n_docs, bands*rows) uint32 array, row i for texts[i]; equal to
    `signature_of_shingles(shingles(t))` for each text, computed in chunks of ~256 KB of text."""
    rows: list[np.ndarray] = []
    chunk: list[bytes] = []
    size = 0
    for text in texts:
        chunk.append(_normalised(text))
        size += len(chunk[-1])
        if size >= _CHUNK_BYTES:
            rows += _signatures_of_hashes(_document_shingle_hashes(chunk, params.n_grams), params)
            chunk, size = [], 0
    if chunk:
        rows += _signatures_of_hashes(_document_shingle_hashes(chunk, params.n_grams), params)
    if not rows:
        return np.empty((0, params.num_perm), SIGNATURE_DTYPE)
    return np.stack(rows)


def is_empty_signature(sig: np.ndarray) -> bool:
    """True for the signature of a document without words (no shingle was hashed)."""
    return bool(np.all(sig == _EMPTY_VALUE))


def signature_to_bytes(sig: np.ndarray) -> bytes:
    """Compact storage: the signature as little-endian uint32 values (4 * bands * rows bytes)."""
    return np.asarray(sig, dtype=SIGNATURE_DTYPE).tobytes()


def signature_from_bytes(data: bytes, params: MinHashParams | None = None) -> np.ndarray:
    """Inverse of `signature_to_bytes`; checks the length against `params` when given."""
    if len(data) % SIGNATURE_DTYPE.itemsize:
        raise ValueError(f"signature bytes must be a multiple of 4 long, got {len(data)} bytes")
    sig = np.frombuffer(data, dtype=SIGNATURE_DTYPE).copy()
    if params is not None and len(sig) != params.num_perm:
        raise ValueError(
            f"signature has {len(sig)} values but {params} needs {params.num_perm}; was it made with other params?"
        )
    return sig


# --- LSH bands and similarity -------------------------------------------------------------------------------


def band_hashes(sig: np.ndarray, params: MinHashParams = DEFAULT_PARAMS) -> list[int]:
    """One signed 64-bit hash per band (fits an Iceberg `long`): BLAKE2b-64 of the band number and its rows'
    little-endian bytes. An empty signature gives no bands, so wordless documents are never candidates."""
    if len(sig) != params.num_perm:
        raise ValueError(f"signature has {len(sig)} values, {params} needs {params.num_perm}")
    if is_empty_signature(sig):
        return []
    raw = np.asarray(sig, dtype=SIGNATURE_DTYPE).tobytes()
    width = params.rows * SIGNATURE_DTYPE.itemsize
    return [
        int.from_bytes(
            hashlib.blake2b(raw[b * width : (b + 1) * width], digest_size=8, person=b"tl-band%d" % b).digest(),
            "little",
            signed=True,
        )
        for b in range(params.bands)
    ]


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Estimated Jaccard similarity: the fraction of equal signature rows (0.0 if either document is empty)."""
    if len(sig_a) != len(sig_b):
        raise ValueError(f"signatures differ in length: {len(sig_a)} vs {len(sig_b)}")
    if is_empty_signature(sig_a) or is_empty_signature(sig_b):
        return 0.0
    return float(np.count_nonzero(sig_a == sig_b)) / len(sig_a)


def exact_jaccard(shingles_a: Iterable[bytes], shingles_b: Iterable[bytes]) -> float:
    """Exact Jaccard similarity of two documents' shingle SETS (0.0 when both are empty)."""
    a, b = set(shingles_a), set(shingles_b)
    union = len(a | b)
    return len(a & b) / union if union else 0.0
