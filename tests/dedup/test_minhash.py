"""MinHash signatures and LSH bands: normalisation, shingles, determinism, band hashes, similarity helpers."""

from __future__ import annotations

import hashlib
import json
import os
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from datasketch import MinHash
from hypothesis import given, settings
from hypothesis import strategies as st

from assets.dedup.minhash import (
    SCHEME,
    MinHashParams,
    band_hashes,
    estimated_jaccard,
    exact_jaccard,
    is_empty_signature,
    normalise_for_minhash,
    shingle_hashes,
    shingles,
    signature_from_bytes,
    signature_of_shingles,
    signature_to_bytes,
    signatures,
)
from tests.dedup.reference import candidate_pairs, lsh_threshold, match_probability, shingle_hash32, signature

REPO = Path(__file__).resolve().parents[2]
P = MinHashParams()
ALBEDO = (
    "The Albedo of a surface is the fraction of incident sunlight that the surface reflects. Fresh snow "
    "has an albedo of about 0.9; the oceans, about 0.06."
)
# sha256 of signature_to_bytes(signature(ALBEDO)) with the default params. If this changes, every stored
# signature and band hash changes with it: a new datasketch scheme, hash function or normalisation needs a
# rebuild of dedup.minhash_bands, not just a new constant here. (Last changed by the word-hash shingle
# hashing, which replaced BLAKE2b-32 of each shingle.)
ALBEDO_SIGNATURE_SHA256 = "d7205f01d18da919f3468d40b455d0968fd18471346b12f75dc77271b646c521"

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)


def test_params_defaults_are_finewebs():
    assert (P.n_grams, P.bands, P.rows, P.seed, P.num_perm) == (5, 14, 8, 1, 112)
    with pytest.raises(ValueError, match="bands"):
        MinHashParams(bands=0)


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("Hello,   World!\n\tAgain", "hello world again"),
        ("Café naïve RÉSUMÉ Ångström İstanbul", "cafe naive resume angstrom istanbul"),
        ("In 2024, 3.14 and 1,000,000 people; abc123", "in 0 0 0 and 0 0 0 people abc0"),
        ("it's don’t rock'n'roll", "its dont rocknroll"),
        ("well-known — e-mail_address (see [1])", "well known e mail address see 0"),
        ("ﬁne ＦＵＬＬ x²", "fine full x0"),  # NFKD: ligature, full-width letters, superscript digit
        ("Привет, мир! 中文，字符", "привет мир 中文 字符"),  # other scripts are kept, only punctuation goes
        ("  \n ", ""),
        # a full-width apostrophe is NFKD "'" and dropped too; no-break space and em dash separate words
        ("it\uff07s  l\u2019homme  a\u00a0\u2014\u00a0b", "its lhomme a b"),
        ("x" + "\u0416" * 40 + "1\u0663\u00bd", "x" + "\u0436" * 40 + "0 0"),  # long run, Arabic-Indic digit
    ],
)
def test_normalisation(raw, normalised):
    assert normalise_for_minhash(raw) == normalised


@settings(max_examples=200, deadline=None)
@given(texts)
def test_normalisation_is_idempotent_and_shingles_see_only_the_normalised_text(text):
    norm = normalise_for_minhash(text)
    assert normalise_for_minhash(norm) == norm
    assert shingles(text) == shingles(norm)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=string.printable, max_size=200))
def test_ascii_case_and_punctuation_do_not_change_shingles(text):
    assert shingles(text.upper()) == shingles(text.lower())
    assert shingles(text.replace(" ", " , ")) == shingles(text)


def test_shingles_are_word_5_grams():
    assert shingles("one two three four five six seven") == [
        b"one two three four five",
        b"two three four five six",
        b"three four five six seven",
    ]
    assert shingles("Just three words.") == [b"just three words"]
    assert shingles("!!! ...") == []
    assert shingles("a b c d e", n=2) == [b"a b", b"b c", b"c d", b"d e"]


def test_signature_shape_and_empty_document():
    sig = signature(ALBEDO)
    assert sig.dtype == np.uint32 and sig.shape == (112,)
    empty = signature("  ,;  ")
    assert is_empty_signature(empty) and not is_empty_signature(sig)
    assert band_hashes(empty) == []  # a document without words is nobody's near-duplicate
    assert estimated_jaccard(empty, empty) == 0.0


def test_signature_ignores_case_punctuation_and_spacing():
    assert np.array_equal(signature(ALBEDO), signature(ALBEDO.upper().replace(" ", "  \n").replace(".", " !")))


def test_signature_is_pinned():
    assert hashlib.sha256(signature_to_bytes(signature(ALBEDO))).hexdigest() == ALBEDO_SIGNATURE_SHA256


@settings(max_examples=200, deadline=None)
@given(texts)
def test_signature_of_a_text_equals_that_of_its_shingles(text):
    # signatures() hashes whole documents word by word; signature_of_shingles() hashes given shingles: the same
    # shingles must give the same values.
    sh = shingles(text)
    assert np.array_equal(signature(text), signature_of_shingles(sh))
    assert np.array_equal(shingle_hashes(sh), [shingle_hash32(s) for s in sh])


def test_signatures_of_many_chunks_equal_one_by_one():
    # signatures() hashes ~256 KB of text at a time; documents on both sides of a chunk boundary, and short and
    # empty ones between them, must not see each other.
    wiki = [
        json.loads(line)["text"]
        for line in (REPO / "tests" / "curated" / "data" / "quality" / "wikipedia_paragraphs.jsonl").open()
    ]
    docs = [w for _ in range(1 + (1 << 19) // sum(map(len, wiki))) for w in wiki + ["", "two words", "!"]]
    docs += [ALBEDO, "x"]
    batch = signatures(docs)
    assert sum(map(len, docs)) > 1 << 19  # two chunks at least
    edges = [0, 1, len(wiki), len(wiki) + 1, len(wiki) + 2, len(docs) - 2, len(docs) - 1]
    for k in edges + list(range(3, len(docs), 37)):
        assert np.array_equal(batch[k], signature_of_shingles(shingles(docs[k]))), k


def test_shingle_hashes_of_odd_bytes():
    # Any bytes are a valid shingle: empty words, NUL bytes, invalid UTF-8, many words. Length and word count
    # are hashed too, so leading zero bytes or an extra space change the value.
    odd = [b"", b" ", b"a", b"\x00a", b"a ", b" a", b"a b", b"a  b", b"\xff\xfe", b"a b c d e f g h i j"]
    values = shingle_hashes(odd)
    assert values.dtype == np.uint32 and len(set(values.tolist())) == len(odd)
    assert values.tolist() == [shingle_hash32(s) for s in odd]
    assert shingle_hashes([]).shape == (0,)


def test_shingle_hashes_spread_like_random_32_bit_values():
    # The distinct 5-grams of real text: 32-bit collisions about as many as the birthday bound predicts, and
    # every bit set in about half of the values.
    wiki = [
        json.loads(line)["text"]
        for line in (REPO / "tests" / "curated" / "data" / "quality" / "wikipedia_paragraphs.jsonl").open()
    ]
    distinct = sorted({s for w in wiki for s in shingles(w)} | {s for w in wiki for s in shingles(w, 2)})
    values = shingle_hashes(distinct)
    n = len(distinct)
    expected = n * (n - 1) / 2 / 2**32
    assert n > 5000
    assert n - len(np.unique(values)) <= expected + 4 * expected**0.5 + 3
    bits = (values[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 4 * 0.5 / n**0.5)


def test_signature_equals_datasketch_one_update_at_a_time():
    # The batch path must give what datasketch's own per-value path gives with the same hash and scheme.
    m = MinHash(num_perm=P.num_perm, seed=P.seed, hashfunc=shingle_hash32, scheme=SCHEME)
    for s in shingles(ALBEDO):
        m.update(s)
    assert np.array_equal(signature(ALBEDO), m.hashvalues)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_signature_depends_only_on_the_shingle_set(shingle_list, rnd):
    shuffled = shingle_list * 2
    rnd.shuffle(shuffled)
    assert np.array_equal(signature_of_shingles(shingle_list), signature_of_shingles(shuffled))


def test_batch_equals_one_by_one_and_params_matter():
    docs = [ALBEDO, "", "Another short text about nothing much at all, really."]
    batch = signatures(docs)
    assert batch.shape == (3, 112)
    assert all(np.array_equal(batch[i], signature(d)) for i, d in enumerate(docs))
    assert signatures([]).shape == (0, 112)
    assert not np.array_equal(signature(ALBEDO), signature(ALBEDO, MinHashParams(seed=2)))
    assert signature(ALBEDO, MinHashParams(bands=4, rows=5)).shape == (20,)


def test_signature_and_band_hashes_do_not_depend_on_pythonhashseed():
    code = (
        "import json, sys\n"
        "from assets.dedup.minhash import signatures, signature_to_bytes, band_hashes\n"
        "sigs = signatures(json.loads(sys.stdin.read()))\n"
        "print(json.dumps([[signature_to_bytes(s).hex(), band_hashes(s)] for s in sigs]))\n"
    )
    docs = [ALBEDO, "Één twee drie vier vijf zes zeven acht negen tien.", "short"]
    outputs = set()
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(docs),
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            check=True,
        ).stdout
        outputs.add(out)
    assert len(outputs) == 1
    here = [[signature_to_bytes(signature(t)).hex(), band_hashes(signature(t))] for t in docs]
    assert json.loads(outputs.pop()) == here


def test_bytes_round_trip():
    sig = signature(ALBEDO)
    data = signature_to_bytes(sig)
    assert len(data) == 4 * 112
    assert np.array_equal(signature_from_bytes(data, P), sig)
    with pytest.raises(ValueError, match="112"):
        signature_from_bytes(data[:-4], P)
    with pytest.raises(ValueError, match="multiple of 4"):
        signature_from_bytes(data[:-1])


def test_band_hashes_are_signed_64_bit_and_local_to_their_band():
    sig = signature(ALBEDO)
    hashes = band_hashes(sig)
    assert len(hashes) == 14 and all(-(2**63) <= h < 2**63 for h in hashes)
    assert len(set(hashes)) == 14  # the band number is hashed too: equal rows in two bands do not collide
    changed = sig.copy()
    changed[3 * 8 + 5] ^= 1  # one row of band 3
    after = band_hashes(changed)
    assert [k for k in range(14) if after[k] != hashes[k]] == [3]
    with pytest.raises(ValueError, match="112"):
        band_hashes(sig[:100])


def test_same_band_rows_give_same_band_hash():
    a = signature(ALBEDO)
    b = a.copy()
    b[:8] = 0  # band 0 differs, the rest is equal
    same = [x == y for x, y in zip(band_hashes(a), band_hashes(b))]
    assert same == [False] + [True] * 13


@settings(max_examples=100, deadline=None)
@given(texts, texts)
def test_similarities_are_symmetric_and_bounded(a, b):
    sa, sb = signature(a), signature(b)
    assert estimated_jaccard(sa, sb) == estimated_jaccard(sb, sa)
    assert 0.0 <= estimated_jaccard(sa, sb) <= 1.0
    ja = exact_jaccard(shingles(a), shingles(b))
    assert ja == exact_jaccard(shingles(b), shingles(a)) and 0.0 <= ja <= 1.0
    if shingles(a):
        assert estimated_jaccard(sa, sa) == 1.0 and exact_jaccard(shingles(a), shingles(a)) == 1.0


def test_exact_jaccard_on_sets():
    assert exact_jaccard([b"a", b"b", b"b"], [b"b", b"c"]) == pytest.approx(1 / 3)
    assert exact_jaccard([], []) == 0.0
    assert exact_jaccard([b"x"], [b"y"]) == 0.0


def test_match_probability_is_the_lsh_s_curve():
    assert match_probability(0.8) == pytest.approx(0.9235, abs=1e-4)  # datatrove's comment: 0.924
    assert match_probability(0.0) == 0.0 and match_probability(1.0) == 1.0
    values = [match_probability(s / 100) for s in range(101)]
    assert values == sorted(values)
    assert lsh_threshold() == pytest.approx(0.719, abs=1e-3)  # (1/14)^(1/8)


def test_candidate_pairs_share_a_band():
    lists = [[1, 2, 3], [9, 2, 8], [1, 7, 7], [4, 5, 3], [5, 4, 6]]
    # doc 0 ~ 1 (band 1), 0 ~ 2 (band 0), 0 ~ 3 (band 2); 3 and 4 share hash values but in other bands
    assert candidate_pairs(lists) == {(0, 1), (0, 2), (0, 3)}
    assert candidate_pairs([]) == set()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=3, max_size=3), max_size=12))
def test_candidate_pairs_equal_brute_force(lists):
    brute = {
        (i, j)
        for i in range(len(lists))
        for j in range(i + 1, len(lists))
        if any(a == b for a, b in zip(lists[i], lists[j]))
    }
    assert candidate_pairs(lists) == brute


def test_near_duplicates_of_real_text_become_candidates():
    wiki = [
        json.loads(line)
        for line in (REPO / "tests" / "curated" / "data" / "quality" / "wikipedia_paragraphs.jsonl").open()
    ]
    doc = " ".join(wiki[1]["text"].split("\n")[:6])  # "Albedo": a few hundred words of real text
    edited = doc.replace("albedo", "reflectivity", 1).replace(". ", ", so. ", 2)
    other = " ".join(wiki[2]["text"].split("\n")[:6])
    sigs = signatures([doc, edited, other])
    assert exact_jaccard(shingles(doc), shingles(edited)) > 0.9
    assert estimated_jaccard(sigs[0], sigs[1]) > 0.8 and estimated_jaccard(sigs[0], sigs[2]) < 0.1
    assert candidate_pairs([band_hashes(s) for s in sigs]) == {(0, 1)}
