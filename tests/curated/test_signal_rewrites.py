"""The signals' faster forms give exactly what their plain definitions give (issue 41: every value unchanged).

Each rewrite is checked against the definition it replaced, on deterministic random strings over the characters
where the two could part ways (white space of every kind, dots, apostrophes, combining marks) and on a real page."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from assets.curated import language_rules, pii, quality
from assets.curated.extract import _BLANK_LINES_RE

ALPHABET = [*"ab1_ .'’-\n\t\r\x0b\x85\u2028\u00a0äß\u0301\u093f\u0915!,#…", "...", "l'", "\n\n\n", "the ", "and "]
PAGE = (
    "The page. It has lines.\n\nAnd paragraphs - with bullets...\n- one\n- one\n\n\n"
    "L’homme qu'il a vu… l'été. Ein Satz, noch einer. e-mail 3.14 o'clock\n" * 3
)
W = language_rules._W


def _strings(n: int = 3000) -> list[str]:
    rng = random.Random(41)
    return [PAGE, *("".join(rng.choices(ALPHABET, k=rng.randint(0, 24))) for _ in range(n))]


@pytest.mark.parametrize(
    ("ours", "definition"),
    [
        (language_rules.WORD_TOKEN_RE, rf"\w{W}*(?:['’.\-]{W}+)*|\.{{2,}}|[^\w\s]"),
        (language_rules.ELISION_TOKEN_RE, rf"\w{W}*['’](?=\w)|\w{W}*(?:[.\-]{W}+)*|\.{{2,}}|[^\w\s]"),
    ],
)
def test_segmenter_regexes_give_the_alternations_tokens(ours, definition):
    plain = re.compile(definition)
    for text in _strings():
        assert ours.findall(text) == plain.findall(text), repr(text)


def test_line_paragraph_and_blank_line_regexes_split_as_written():
    for text in _strings():
        assert quality.PARAGRAPH_SPLIT.split(text) == re.split(r"\n{2,}", text)
        assert quality.LINE_SPLIT.split(text) == re.split(r"\n+", text)
        assert _BLANK_LINES_RE.sub("\n\n", text) == re.sub(r"\n{3,}", "\n\n", text)


def _gopher_token_by_token(tokens: list[str]) -> dict:
    words = [t for t in tokens if re.match(r"\w", t)]
    return {
        "gopher_n_words": len(words),
        "gopher_mean_word_len": sum(map(len, words)) / len(words) if words else 0.0,
        "gopher_alpha_token_frac": (
            sum(bool(re.search(r"[^\W\d_]", w)) for w in words) / len(tokens) if tokens else 0.0
        ),
        "gopher_n_stop_words": sum(1 for w in words if w in quality.GOPHER_STOP_WORDS),
    }


def test_gopher_word_signals_over_distinct_tokens_equal_token_by_token():
    for text in _strings():
        tokens = quality.tokenize_words(text)
        out: dict = {}
        quality._gopher_quality_signals(text, tokens, Counter(tokens), out)
        assert {k: out[k] for k in _gopher_token_by_token(tokens)} == _gopher_token_by_token(tokens), repr(text)


def test_stop_words_over_distinct_tokens_equal_token_by_token():
    stop = frozenset({"l'", "qu'", "the", "and", "ein"})
    for text in _strings():
        tokens = language_rules.ELISION_TOKEN_RE.findall(text)
        plain = sum(1 for t in tokens if t in stop or t.replace("’", "'") in stop)
        assert quality._count_stop_words(Counter(tokens), stop) == plain, repr(text)


def test_pii_regexes_match_as_written():
    rng = random.Random(6)
    hexy = [*"0123abcdefABFg:.-_ \nx١", "::", "2001:db8", "ff", "DE44", "AB1"]
    plain_ipv6 = re.compile(r"(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:]|\.\d)", re.ASCII)
    plain_iban = re.compile(r"[A-Z]{2}\d{2}", re.ASCII)
    texts = [PAGE, "2001:db8::1 fe80::1:2 10:30:00 DE44 5001 0517 5407 3249 31", *_strings(500)]
    texts += ["".join(rng.choices(hexy, k=rng.randint(0, 30))) for _ in range(5000)]
    for text in texts:
        assert [m.span() for m in pii._IPV6_RE.finditer(text)] == [m.span() for m in plain_ipv6.finditer(text)]
        assert bool(pii._IBAN_HINT_RE.search(text)) == bool(plain_iban.search(text)), repr(text)


def test_phone_candidates_and_policy_lines_as_written():
    rng = random.Random(7)
    chars = [*"0123456789 ().-/+#a_,\n", "+49 ", "(030) ", "1.2", "١"]
    plain = re.compile(r"(?<![\w+\-./(#])(?:\+|\()?\d[\d ().\-/]{5,24}\d(?![\w\-/]|[.,]\d)", re.ASCII)
    texts = ["Call +49 (030) 1234-5678 or (555) 123-4567.", *("".join(rng.choices(chars, k=30)) for _ in range(5000))]
    for text in texts:
        assert [m.span() for m in pii._PHONE_CANDIDATE_RE.finditer(text)] == [m.span() for m in plain.finditer(text)]
    for phrase in quality.C4_POLICY_SUBSTRINGS:
        assert quality._may_be_policy(f"we {phrase} here")
    assert not quality._may_be_policy("the use of cookie jars; terms of service")
