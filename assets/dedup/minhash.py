"""MinHash signatures and LSH band hashes for near-duplicate detection (FineWeb settings). No Dagster here.

A document becomes the set of its word 5-grams ("shingles") over text normalised the way datatrove's
`simplify_text` does it (lower case, no punctuation, digits folded, diacritics stripped, whitespace collapsed).
Its signature is a datasketch MinHash over those shingles with bands*rows = 14*8 = 112 permutations; each band
of 8 rows is hashed to one signed 64-bit integer (an Iceberg `long`). Two documents become candidates when they
share a band hash, i.e. with probability 1-(1-s^8)^14 for Jaccard similarity s (about 0.92 at s = 0.8), and a
candidate pair is confirmed by its estimated Jaccard similarity (the fraction of equal signature rows).

Everything here is a pure function of (text, params): signatures use datasketch's "affine32" permutation scheme
(seeded by numpy's stable legacy RandomState) over an unkeyed BLAKE2b hash of each shingle, so the values are
the same on every machine and independent of PYTHONHASHSEED. Values are 32-bit: a signature is a uint32 array
and stores as 4 * 112 = 448 little-endian bytes.

Limit to know: a 112-row estimate has a standard deviation of about 0.04 near s = 0.8, so pairs within a few
hundredths of the verification threshold fall on either side by chance (tests/dedup/test_minhash_quality.py
measures it on real text); `exact_jaccard` on the candidates' shingles removes that noise where texts are at hand.
"""

from __future__ import annotations

import functools
import hashlib
import re
import struct
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import datasketch
import numpy as np
from datasketch import MinHash

if int(datasketch.__version__.split(".")[0]) < 2:  # pragma: no cover - depends on the installed package
    raise ImportError(
        f"assets.dedup.minhash needs datasketch>=2.0 (its 'affine32' MinHash scheme); found "
        f"{datasketch.__version__}. Upgrade with `pip install 'datasketch>=2,<3'`: older versions give "
        "different signatures, so stored band hashes would no longer match."
    )

# The permutation scheme is part of the stored format: a different scheme gives different signatures, so it
# is pinned here rather than left to datasketch's default.
SCHEME = "affine32"
SIGNATURE_DTYPE = np.dtype("<u4")
_EMPTY_VALUE = np.uint32(0xFFFFFFFF)  # datasketch's initial value: no shingle was ever hashed

DEFAULT_VERIFY_THRESHOLD = 0.8  # FineWeb / RedPajama's duplicate threshold; estimates straddle it, see above


@dataclass(frozen=True)
class MinHashParams:
    """MinHash-LSH settings; the defaults are FineWeb's (datatrove `MinhashConfig`): 5-grams, 14 bands x 8 rows."""

    n_grams: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1

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

_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_WORD = re.compile(r"[^\W_]+")  # runs of letters and digits in any script; punctuation, symbols and `_` split
_DIGITS = re.compile(r"\d+")


def _fold_diacritics(match: re.Match) -> str:
    # NFKD then drop nonspacing marks (datatrove drops category "Mn" too). Applied to non-ASCII runs only:
    # ASCII characters are their own NFKD and never combine, so the result equals folding the whole text,
    # and mostly-ASCII text skips the per-character work.
    return "".join(c for c in unicodedata.normalize("NFKD", match.group()) if unicodedata.category(c) != "Mn")


def _words(text: str) -> list[str]:
    text = text.replace("'", "").replace("\u2019", "")  # "it's" -> "its", "don’t" -> "dont", as datatrove
    if not text.isascii():
        text = _NON_ASCII.sub(_fold_diacritics, text)
    return _WORD.findall(_DIGITS.sub("0", text.lower()))


def normalise_for_minhash(text: str) -> str:
    """Text as MinHash sees it: NFKD without diacritics, lower case, apostrophes dropped, other punctuation and
    symbols -> space, digit runs -> "0", single spaces. Like datatrove's `simplify_text`, except that punctuation
    other than apostrophes becomes a space (so "well-known" gives the two words of "well known") instead of
    being deleted."""
    return " ".join(_words(text))


def shingles(text: str, n: int = 5) -> list[bytes]:
    """Word n-grams of the normalised text as UTF-8 bytes, in order (repeats kept). A document with fewer than
    n words gives one shingle of all its words; an empty one gives none."""
    words = _words(text)
    if not words:
        return []
    if len(words) < n:
        return [" ".join(words).encode()]
    return [" ".join(gram).encode() for gram in zip(*(words[i:] for i in range(n)))]


# --- signatures ---------------------------------------------------------------------------------------------

_U32 = struct.Struct("<I").unpack


def shingle_hash32(shingle: bytes) -> int:
    """The 32-bit hash MinHash applies to a shingle: the first 4 bytes of BLAKE2b, little-endian.

    Chosen over datasketch's default (SHA-1 truncated to 32 bits): as well mixed, in the standard library, and
    faster (whole signatures took 1.0 vs 1.2 us per shingle in bench/dedup_quality.py); xxhash would be
    faster again but is not a dependency of the project. Changing it changes every stored signature."""
    return _U32(hashlib.blake2b(shingle, digest_size=4).digest())[0]


@functools.lru_cache(maxsize=8)
def _permutations(num_perm: int, seed: int) -> np.ndarray:
    perms = MinHash(num_perm=num_perm, seed=seed, hashfunc=shingle_hash32, scheme=SCHEME).permutations
    perms.setflags(write=False)  # shared by every MinHash built from these params
    return perms


def _minhash(params: MinHashParams) -> MinHash:
    return MinHash(
        num_perm=params.num_perm,
        seed=params.seed,
        hashfunc=shingle_hash32,
        permutations=_permutations(params.num_perm, params.seed),
        scheme=SCHEME,
    )


def signature_of_shingles(shingle_list: Iterable[bytes], params: MinHashParams = DEFAULT_PARAMS) -> np.ndarray:
    """MinHash signature (uint32, length bands*rows) of already-made shingles, in one `update_batch` call."""
    m = _minhash(params)
    m.update_batch(shingle_list)
    return m.hashvalues.astype(SIGNATURE_DTYPE, copy=False)


def signature(text: str, params: MinHashParams = DEFAULT_PARAMS) -> np.ndarray:
    """MinHash signature of a document: uint32 array of length bands*rows; all 0xFFFFFFFF if it has no words."""
    return signature_of_shingles(shingles(text, params.n_grams), params)


def signatures(texts: Iterable[str], params: MinHashParams = DEFAULT_PARAMS) -> np.ndarray:
    """Signatures of many documents as a (n_docs, bands*rows) uint32 array, row i for texts[i]."""
    rows = [signature(t, params) for t in texts]
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


def match_probability(s: float, bands: int = DEFAULT_PARAMS.bands, rows: int = DEFAULT_PARAMS.rows) -> float:
    """Probability that two documents of Jaccard similarity s share at least one band: 1-(1-s^r)^b."""
    return 1.0 - (1.0 - s**rows) ** bands


def lsh_threshold(bands: int = DEFAULT_PARAMS.bands, rows: int = DEFAULT_PARAMS.rows) -> float:
    """The similarity where the LSH S-curve is steepest, about (1/b)^(1/r) (0.72 for 14 x 8)."""
    return (1.0 / bands) ** (1.0 / rows)


def is_near_duplicate(sig_a: np.ndarray, sig_b: np.ndarray, threshold: float = DEFAULT_VERIFY_THRESHOLD) -> bool:
    """Verification of an LSH candidate pair: estimated Jaccard similarity >= threshold."""
    return estimated_jaccard(sig_a, sig_b) >= threshold


def candidate_pairs(band_hash_lists: Sequence[Sequence[int]]) -> set[tuple[int, int]]:
    """In-memory reference LSH: pairs (i, j), i < j, of documents sharing a hash in the same band.

    Quadratic in bucket size; meant for tests and small sets, not for the pipeline."""
    buckets: dict[tuple[int, int], list[int]] = defaultdict(list)
    for doc, hashes in enumerate(band_hash_lists):
        for band, h in enumerate(hashes):
            buckets[(band, h)].append(doc)
    pairs: set[tuple[int, int]] = set()
    for members in buckets.values():
        for k, i in enumerate(members):
            pairs.update((i, j) for j in members[k + 1 :])
    return pairs
