"""Heuristic quality signals (Gopher, C4, FineWeb) and the keep/drop decision derived from them.

Signals are columns, decisions are derived. ``quality_signals(text)`` computes every numeric signal once;
``quality_decision(signals, thresholds)`` reads only those numbers, so a corpus can be re-thresholded
from the stored columns without touching the text again. The rules mirror datatrove's filters
(``src/datatrove/pipeline/filters/``: ``gopher_repetition_filter.py``, ``gopher_quality_filter.py``,
``c4_filters.py``, ``fineweb_quality_filter.py``); this is our own code, written against their semantics.

Decision order (the FineWeb pipeline's order; the first failing rule is the reason, see QUALITY_REASONS):

1. gopher_rep: duplicate paragraph fraction, duplicate paragraph char fraction, duplicate line fraction,
   duplicate line char fraction, top 2/3/4-gram char fraction, duplicate 5..10-gram char fraction.
2. gopher_quality: non-symbol word count (low, high), mean word length (low, high), ``#`` per token,
   ellipsis per token, bullet-start line fraction, ellipsis-end line fraction, alphabetic token
   fraction, stop-word count.
3. c4: "lorem ipsum" line, curly-bracket line, too few sentences.
4. fineweb: line punctuation ratio, short line ratio, duplicated line char ratio, newline ratio.

Comparisons are datatrove's: gopher maxima drop on ``>``, minima on ``<``; fineweb drops on
``line_punct_ratio <= thr``, ``short_line_ratio >= thr``, ``char_dup_ratio >= thr``,
``newline_ratio > thr``; c4 drops on ``n_sentences < min`` and on more lorem/curly lines than allowed.
A threshold of ``None`` disables its rule (datatrove disables on any falsy value; here 0 is a threshold).

C4 line-level removals. datatrove's C4 filter rewrites the text (drops lines) and drops the whole
document only for lorem ipsum, a curly bracket, or too few sentences. Here the text is never rewritten:
each removal cause is a count column (``c4_n_lines_*``), the document-level rules read counts, and
``c4_clean_text(text)`` returns the text exactly as the FineWeb pipeline would pass it on (C4 with
``filter_no_terminal_punct=False``). As in that pipeline, the ``fineweb_*`` signals are computed on that
cleaned text, while ``gopher*`` and ``c4_*`` signals see the text as given. C4 signals exist for both
settings of the terminal-punctuation switch: the plain names treat every line as a candidate (FineWeb's
setting, the default), the ``*_terminal`` names only lines ending in terminal punctuation (the C4 paper).
The line-level parameters (3 words per line, 1000-char words, javascript and policy lines, citation
stripping, 30-char short lines) shape the text the signals are computed on, so changing them means
recomputing signals; they are module constants, not thresholds.

Known differences from datatrove, all documented so a reader can judge them:
- Words come from one regex tokenizer (``TOKEN_RE``: word runs with inner ``' ’ . -``, ``..``-runs, single
  symbols) instead of NLTK's Treebank tokenizer; "don't" is one token here, two in NLTK.
- A token is a "non-symbol word" when it contains a word character (``\\w``); datatrove tests against its
  own punctuation list, so a lone currency sign or emoji counts as a word there and as a symbol here.
- Sentences in a C4 line are counted by a regex (``count_sentences``: ``.!?`` then space then an
  upper-case letter or digit, not after a single capital or Mr/Mrs/Ms/Dr/St/vs) instead of NLTK punkt.
- Duplicate 5..10-grams are compared as token tuples; datatrove compares ``"".join(tokens)``, which can
  make two different n-grams collide ("a bc" / "ab c"). Character counts are the same (no spaces).
- If a document has both a lorem-ipsum line and a curly-bracket line, datatrove reports whichever comes
  first in the text; here ``c4_lorem_ipsum`` always wins. Keep/drop is the same either way.
- Disabling the curly-bracket rule (``None``) does not put those lines back into the sentence count, as
  turning datatrove's ``filter_curly_bracket`` off would.
- Zero denominators give 0.0 (datatrove raises ZeroDivisionError on an empty document); an empty
  document fails ``gopher_quality_n_words_low``.

Other languages (``language_rules.py``). ``quality_signals(text, words)`` with a ``WordRules`` computes the
same columns the way FineWeb-2's per-language pipeline does: words come from the language's segmenter,
``gopher_n_stop_words`` counts the language's stop words among all tokens (``’`` read as ``'``, so French
``l’`` matches ``l'``), and the ``fineweb_*`` signals read the text as given (FineWeb-2 runs no C4 step) with
FineWeb-2's newer semantics: only non-empty lines count, a line ends in punctuation when its last character
is in ``MULTILINGUAL_TERMINAL_PUNCT``, and the newline ratio is newlines / tokens. ``words=None`` is the
English path above, unchanged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, count

import numpy as np

from assets.knobs import knob

__all__ = [
    "QUALITY_REASONS",
    "QUALITY_SIGNAL_TYPES",
    "QualityThresholds",
    "QUALITY_SIGNAL_DOCS",
    "WordRules",
    "c4_clean_text",
    "count_sentences",
    "quality_decision",
    "quality_failures",
    "quality_rules",
    "quality_signals",
    "tokenize_words",
]

# Word runs keep inner apostrophes, periods and hyphens ("o'clock", "3.14", "e-mail"); an ellipsis written
# as dots stays one token (as in NLTK) so "..." does not count three times as a symbol.
# The tokens of r"\w+(?:['’.\-]\w+)*|\.{2,}|[^\w\s]", written as one leading \S (every token starts with one)
# then what follows it: re skips white space with a fast class scan instead of trying three alternatives at
# every position (~20% less CPU on extracted pages, the same tokens).
TOKEN_RE = re.compile(r"\S(?:(?<=\w)\w*(?:['’.\-]\w+)*|(?<=\.)\.+|)")
_IS_WORD = re.compile(r"\w").match  # a token is a word iff it starts with a word character
_HAS_ALPHA = re.compile(r"[^\W\d_]").search

GOPHER_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
GOPHER_BULLETS = ("•", "-")
ELLIPSES = ("...", "…")
# r"\n{2,}" and r"\n+" written with a literal first character, which re jumps to instead of trying every
# position (~5-15x less CPU, the same splits).
PARAGRAPH_SPLIT = re.compile(r"\n\n+")
LINE_SPLIT = re.compile(r"\n\n*")
TOP_NGRAM_SIZES = (2, 3, 4)
DUP_NGRAM_SIZES = (5, 6, 7, 8, 9, 10)

C4_MIN_WORDS_PER_LINE = 3
C4_MAX_WORD_LENGTH = 1000
C4_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
TERMINAL_PUNCT = (".", "?", "!", '"', "'")
C4_POLICY_SUBSTRINGS = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
_POLICY_SEARCH = re.compile("|".join(map(re.escape, C4_POLICY_SUBSTRINGS))).search  # one scan for all of them


def _may_be_policy(lower: str) -> bool:
    """False when no C4_POLICY_SUBSTRINGS can be in the line: each holds "policy", "cookies" or "terms of use",
    and three substring scans cost a third of the regex, which stops at every c, p, t and u."""
    return "policy" in lower or "cookies" in lower or "terms of use" in lower


# The run of .!? comes first so the regex engine can skip ahead to it; the abbreviation checks look back
# from its first character.
_SENTENCE_BREAK = re.compile(
    r"[.!?](?<!\b[A-Z]\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<!\bvs\.)(?<!\bMrs\.)"
    r"[.!?]*[\"'”’)\]]*\s+(?=[\"'“‘(\[]*[A-Z0-9])"
)

FINEWEB_SHORT_LINE_LENGTH = 30
# FineWeb-2 (datatrove's TERMINAL_PUNCTUATION is Unicode's Terminal_Punctuation property): our subset of it,
# with the quotes English FineWeb counts, for the scripts the carried languages use.
MULTILINGUAL_TERMINAL_PUNCT = tuple(".!?'\"…。！？｡．؟۔।॥።፧።჻։՜՞")

# The per-language rules table (``language_rules.py``, data/language_rules/fineweb2/) a thresholds policy was
# approved with: its files' content hash. A test pins it to the files, so editing the table changes the
# code's default policy, and a stored policy naming another table is refused rather than silently reread.
LANGUAGE_RULES_TABLE = "fineweb2:a80311dc4eb7"

QUALITY_SIGNAL_TYPES: dict[str, str] = {
    # gopher repetition (text as given)
    "gopher_rep_n_paragraphs": "int",
    "gopher_rep_dup_para_frac": "float",
    "gopher_rep_dup_para_char_frac": "float",
    "gopher_rep_n_lines": "int",
    "gopher_rep_dup_line_frac": "float",
    "gopher_rep_dup_line_char_frac": "float",
    **{f"gopher_rep_top_{n}gram_char_frac": "float" for n in TOP_NGRAM_SIZES},
    **{f"gopher_rep_dup_{n}gram_char_frac": "float" for n in DUP_NGRAM_SIZES},
    # gopher quality (text as given)
    "gopher_n_tokens": "int",
    "gopher_n_words": "int",
    "gopher_mean_word_len": "float",
    "gopher_hash_ratio": "float",
    "gopher_ellipsis_ratio": "float",
    "gopher_n_lines": "int",
    "gopher_bullet_line_frac": "float",
    "gopher_ellipsis_line_frac": "float",
    "gopher_alpha_token_frac": "float",
    "gopher_n_stop_words": "int",
    # c4 (text as given; plain names = every line a candidate, *_terminal = C4-paper line filter)
    "c4_n_lines": "int",
    "c4_max_word_len": "int",
    "c4_n_lines_long_word": "int",
    "c4_n_lines_too_few_words": "int",
    "c4_n_lines_no_terminal_punct": "int",
    "c4_n_lines_lorem_ipsum": "int",
    "c4_n_lines_javascript": "int",
    "c4_n_lines_curly_bracket": "int",
    "c4_n_lines_policy": "int",
    "c4_n_lines_kept": "int",
    "c4_n_sentences": "int",
    "c4_n_lines_lorem_ipsum_terminal": "int",
    "c4_n_lines_curly_bracket_terminal": "int",
    "c4_n_sentences_terminal": "int",
    # fineweb (text after c4 line removal with filter_no_terminal_punct=False, as in FineWeb)
    "fineweb_n_lines": "int",
    "fineweb_line_punct_ratio": "float",
    "fineweb_short_line_ratio": "float",
    "fineweb_char_dup_ratio": "float",
    "fineweb_newline_ratio": "float",
}


# One line per signal, for column docs (the Iceberg schema and the Dagster UI).
QUALITY_SIGNAL_DOCS: dict[str, str] = {
    "gopher_rep_n_paragraphs": "paragraphs (split on 2+ newlines)",
    "gopher_rep_dup_para_frac": "paragraphs that repeat an earlier paragraph / paragraphs",
    "gopher_rep_dup_para_char_frac": "characters in repeated paragraphs / characters",
    "gopher_rep_n_lines": "lines (split on 1+ newlines)",
    "gopher_rep_dup_line_frac": "lines that repeat an earlier line / lines",
    "gopher_rep_dup_line_char_frac": "characters in repeated lines / characters",
    **{
        f"gopher_rep_top_{n}gram_char_frac": f"characters covered by the most frequent {n}-gram / characters"
        for n in TOP_NGRAM_SIZES
    },
    **{
        f"gopher_rep_dup_{n}gram_char_frac": f"characters in repeated {n}-grams (no overlap) / characters"
        for n in DUP_NGRAM_SIZES
    },
    "gopher_n_tokens": "word and symbol tokens",
    "gopher_n_words": "tokens that contain a letter or digit",
    "gopher_mean_word_len": "mean characters per word",
    "gopher_hash_ratio": "'#' characters / tokens",
    "gopher_ellipsis_ratio": "'...' and '…' / tokens",
    "gopher_n_lines": "lines (str.splitlines)",
    "gopher_bullet_line_frac": "lines starting with '•' or '-' / lines",
    "gopher_ellipsis_line_frac": "lines ending with '...' or '…' / lines",
    "gopher_alpha_token_frac": "tokens containing a letter / tokens",
    "gopher_n_stop_words": "occurrences of the, be, to, of, and, that, have, with (lower case)",
    "c4_n_lines": "lines (str.splitlines)",
    "c4_max_word_len": "longest whitespace-separated word",
    "c4_n_lines_long_word": "lines removed for a word over 1000 characters",
    "c4_n_lines_too_few_words": "lines removed for fewer than 3 words",
    "c4_n_lines_no_terminal_punct": "lines (without an over-long word) not ending in . ? ! \" '",
    "c4_n_lines_lorem_ipsum": "candidate lines containing 'lorem ipsum' (drops the page)",
    "c4_n_lines_javascript": "candidate lines removed for mentioning javascript",
    "c4_n_lines_curly_bracket": "candidate lines containing '{' (drops the page)",
    "c4_n_lines_policy": "candidate lines removed for cookie / privacy / terms-of-use phrases",
    "c4_n_lines_kept": "lines kept by C4 (FineWeb setting); the text the fineweb_* signals read",
    "c4_n_sentences": "sentences in the kept lines (FineWeb setting)",
    "c4_n_lines_lorem_ipsum_terminal": "as c4_n_lines_lorem_ipsum, lines ending in terminal punctuation only",
    "c4_n_lines_curly_bracket_terminal": "as c4_n_lines_curly_bracket, lines ending in terminal punctuation only",
    "c4_n_sentences_terminal": "as c4_n_sentences, lines ending in terminal punctuation only (C4 paper)",
    "fineweb_n_lines": "lines of the C4-cleaned text",
    "fineweb_line_punct_ratio": "lines ending in . ' \" ! ? / lines",
    "fineweb_short_line_ratio": "lines of at most 30 characters / lines",
    "fineweb_char_dup_ratio": "characters in repeated non-empty lines / non-newline characters",
    "fineweb_newline_ratio": "newlines / tokens",
}


@dataclass(frozen=True)
class WordRules:
    """How one language's text is cut into tokens and which of them are stop words (``language_rules.py``)."""

    tokenize: Callable[[str], list[str]]
    stop_words: frozenset[str]


def tokenize_words(text: str) -> list[str]:
    """Split text into word and symbol tokens (the tokenizer every word-based signal uses)."""
    return TOKEN_RE.findall(text)


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _dup_count_and_chars(items: list[str]) -> tuple[int, int]:
    """Elements seen before, and their characters (datatrove's ``find_duplicates``), via one Counter."""
    counts = Counter(items)
    n_dup = len(items) - len(counts)
    dup_chars = sum(len(x) * (c - 1) for x, c in counts.items() if c > 1)
    return n_dup, dup_chars


def _repetition_signals(text: str, tokens: list[str], out: dict) -> None:
    n_chars = len(text)
    paragraphs = PARAGRAPH_SPLIT.split(text.strip())
    n_dup, dup_chars = _dup_count_and_chars(paragraphs)
    out["gopher_rep_n_paragraphs"] = len(paragraphs)
    out["gopher_rep_dup_para_frac"] = _ratio(n_dup, len(paragraphs))
    out["gopher_rep_dup_para_char_frac"] = _ratio(dup_chars, n_chars)

    lines = LINE_SPLIT.split(text)
    n_dup, dup_chars = _dup_count_and_chars(lines)
    out["gopher_rep_n_lines"] = len(lines)
    out["gopher_rep_dup_line_frac"] = _ratio(n_dup, len(lines))
    out["gopher_rep_dup_line_char_frac"] = _ratio(dup_chars, n_chars)

    # n-gram character counts come from prefix sums of token lengths, so no n-gram string is ever built.
    cum = [0, *accumulate(map(len, tokens))]
    stats = _ngram_stats(tokens)
    for n in TOP_NGRAM_SIZES:
        # the most frequent n-gram, the first one in the text among equal counts (as datatrove's
        # Counter.most_common(1)); every occurrence has the same characters as the first
        top, first = stats.top[n]
        frac = _ratio(top * (cum[first + n] - cum[first] + n - 1), n_chars) if top else 0.0
        out[f"gopher_rep_top_{n}gram_char_frac"] = frac
    for n in DUP_NGRAM_SIZES:
        # datatrove's find_all_duplicate: walk left to right, count a repeat once and skip over its span.
        # Only positions whose n-gram occurs twice or more can count (the others just step on), so the walk
        # visits those alone, and steps over the ones inside a counted span.
        positions, grams = stats.repeated[n]
        repeated_chars, span_end, seen = 0, 0, set()
        for p, gram in zip(positions, grams):
            if p < span_end:
                continue
            if gram in seen:
                repeated_chars += cum[p + n] - cum[p]
                span_end = p + n
            else:
                seen.add(gram)
        out[f"gopher_rep_dup_{n}gram_char_frac"] = _ratio(repeated_chars, n_chars)


@dataclass(frozen=True)
class _NgramStats:
    top: dict[int, tuple[int, int]]  # n -> (count of the most frequent n-gram, position of its first occurrence)
    repeated: dict[int, tuple[list[int], list[int]]]  # n -> positions of repeated n-grams, their n-gram ids


def _ngram_stats(tokens: list[str]) -> _NgramStats:
    """The most frequent n-gram for n in TOP_NGRAM_SIZES ((0, 0) without n-grams), and where the n-grams that
    occur twice or more are, for n in DUP_NGRAM_SIZES.

    Exact, no hashing: each n-gram gets a dense integer id from its (n-1)-gram's id and its last token's id
    (numpy's unique over the pairs), so equal ids mean equal token sequences. A repeated n-gram starts with a
    repeated (n-1)-gram, so from n = 3 on only the positions of repeated (n-1)-grams are looked at: every
    occurrence of a repeated n-gram is among them (its count there is exact), and any other n-gram occurs once.
    (Looking at every position up to n = 4, as before, sorted ~25% more keys for the same result.)"""
    n_tokens = len(tokens)
    index: dict[str, int] = {}
    ids = np.fromiter(map(index.setdefault, tokens, count()), dtype=np.int64, count=n_tokens)
    top: dict[int, tuple[int, int]] = {}
    repeated: dict[int, tuple[list[int], list[int]]] = {}
    positions = np.arange(n_tokens)  # the positions still looked at: those of repeated (n-1)-grams
    gram_ids = ids  # there, the id of the (n-1)-gram
    for n in range(2, max(DUP_NGRAM_SIZES) + 1):
        n_grams = max(n_tokens - n + 1, 0)
        keep = positions < n_grams  # an n-gram starts there
        positions, gram_ids = positions[keep], gram_ids[keep]
        best = 0
        if len(positions):
            # every id is < n_tokens, so the pair key is exact in 64 bits for any text that fits in memory
            _, gram_ids, counts = np.unique(
                gram_ids * n_tokens + ids[positions + n - 1], return_inverse=True, return_counts=True
            )
            gram_ids = gram_ids.reshape(-1)
            per_position = counts[gram_ids]
            best = int(counts.max())
            keep = per_position > 1
        if n in TOP_NGRAM_SIZES:
            if best > 1:  # its first occurrence is among the positions looked at (they are in text order)
                top[n] = (best, int(positions[np.argmax(per_position == best)]))
            else:  # every n-gram occurs once: the first one, at 0 (none at all: (0, 0))
                top[n] = (1, 0) if n_grams else (0, 0)
        if best > 1:
            positions, gram_ids = positions[keep], gram_ids[keep]
        else:
            positions, gram_ids = positions[:0], gram_ids[:0]
        if n >= min(DUP_NGRAM_SIZES):
            repeated[n] = (positions.tolist(), gram_ids.tolist())
    return _NgramStats(top, repeated)


def _gopher_quality_signals(text: str, tokens: list[str], counts: Counter, out: dict) -> None:
    """``counts``: ``Counter(tokens)``. Word counts, lengths and letters are summed over the distinct tokens,
    each weighted by its count (integer sums, so the same numbers as token by token, for a third of the look-ups
    on a real page)."""
    n_words = n_word_chars = n_alpha = 0
    for token, n in counts.items():
        if _IS_WORD(token):
            n_words += n
            n_word_chars += n * len(token)
            if _HAS_ALPHA(token):
                n_alpha += n
    n_tokens = len(tokens)
    out["gopher_n_tokens"] = n_tokens
    out["gopher_n_words"] = n_words
    out["gopher_mean_word_len"] = _ratio(n_word_chars, n_words)
    out["gopher_hash_ratio"] = _ratio(text.count("#"), n_tokens)
    out["gopher_ellipsis_ratio"] = _ratio(text.count("...") + text.count("…"), n_tokens)
    lines = text.splitlines()
    out["gopher_n_lines"] = len(lines)
    out["gopher_bullet_line_frac"] = _ratio(sum(1 for s in lines if s.lstrip().startswith(GOPHER_BULLETS)), len(lines))
    out["gopher_ellipsis_line_frac"] = _ratio(sum(1 for s in lines if s.rstrip().endswith(ELLIPSES)), len(lines))
    out["gopher_alpha_token_frac"] = _ratio(n_alpha, n_tokens)
    out["gopher_n_stop_words"] = sum(counts[w] for w in GOPHER_STOP_WORDS)  # every stop word is a word token


def count_sentences(line: str) -> int:
    """Sentences in one line, by the regex that stands in for NLTK punkt in the C4 sentence count."""
    return len(_SENTENCE_BREAK.findall(line)) + 1


@dataclass(frozen=True)
class _C4Lines:
    """What C4 keeps of a text: the kept lines (stripped, citations cut), the lines it removes, and for the kept
    lines that lost a citation the line before and after the cut."""

    kept: list[str]
    removed: list[str]
    cut: list[tuple[str, str]]

    @property
    def text(self) -> str:
        """The cleaned text, as datatrove's C4 filter emits it."""
        return "\n".join(self.kept).strip()

    def n_tokens(self, text_tokens: int) -> int:
        """``TOKEN_RE`` tokens of the kept lines, from the text's: tokens never span white space, so never a line
        break ``splitlines`` cuts at, and stripping a line or joining lines with newlines leaves them alone."""

        def count(line: str) -> int:
            return len(tokenize_words(line))

        return text_tokens - sum(map(count, self.removed)) - sum(count(a) - count(b) for a, b in self.cut)


def _c4_lines(text: str, out: dict | None, filter_no_terminal_punct: bool = False) -> _C4Lines:
    """One pass over the lines: fill the c4_* signals into ``out`` (if given), return what C4 keeps."""
    n_long = n_few = n_no_punct = n_kept = 0
    n_lorem = n_js = n_curly = n_policy = n_sent = 0
    n_lorem_t = n_curly_t = n_sent_t = 0
    max_word_len = 0
    kept: list[str] = []
    removed: list[str] = []
    cut: list[tuple[str, str]] = []
    lines = text.splitlines()
    for raw in lines:
        stripped = raw.strip()
        words = stripped.split()
        longest = max(map(len, words), default=0)
        max_word_len = max(max_word_len, longest)
        if longest > C4_MAX_WORD_LENGTH:
            n_long += 1
            removed.append(raw)
            continue
        line = C4_CITATION.sub("", stripped)
        terminal = line.endswith(TERMINAL_PUNCT) and not line.endswith("...")
        if not terminal:
            n_no_punct += 1
        if len(words) < C4_MIN_WORDS_PER_LINE:
            n_few += 1
            removed.append(raw)
            continue
        lower = line.lower()
        if "lorem ipsum" in lower:
            n_lorem += 1
            n_lorem_t += terminal
            removed.append(raw)
        elif "javascript" in lower:
            n_js += 1
            removed.append(raw)
        elif "{" in line:
            n_curly += 1
            n_curly_t += terminal
            removed.append(raw)
        elif _may_be_policy(lower) and _POLICY_SEARCH(lower):
            n_policy += 1
            removed.append(raw)
        else:
            n = count_sentences(line)
            n_sent += n
            if terminal:
                n_sent_t += n
            if terminal or not filter_no_terminal_punct:
                n_kept += 1
                kept.append(line)
                if line != stripped:
                    cut.append((stripped, line))
            else:
                removed.append(raw)
    if out is not None:
        out["c4_n_lines"] = len(lines)
        out["c4_max_word_len"] = max_word_len
        out["c4_n_lines_long_word"] = n_long
        out["c4_n_lines_too_few_words"] = n_few
        out["c4_n_lines_no_terminal_punct"] = n_no_punct
        out["c4_n_lines_lorem_ipsum"] = n_lorem
        out["c4_n_lines_javascript"] = n_js
        out["c4_n_lines_curly_bracket"] = n_curly
        out["c4_n_lines_policy"] = n_policy
        out["c4_n_lines_kept"] = n_kept
        out["c4_n_sentences"] = n_sent
        out["c4_n_lines_lorem_ipsum_terminal"] = n_lorem_t
        out["c4_n_lines_curly_bracket_terminal"] = n_curly_t
        out["c4_n_sentences_terminal"] = n_sent_t
    return _C4Lines(kept, removed, cut)


def c4_clean_text(text: str, filter_no_terminal_punct: bool = False) -> str:
    """The text after C4's line removals (FineWeb's setting by default), as datatrove's C4 filter emits it."""
    return _c4_lines(text, None, filter_no_terminal_punct).text


def _fineweb_signals(text: str, n_tokens: int, out: dict) -> None:
    lines = text.split("\n")
    n_lines = len(lines)
    out["fineweb_n_lines"] = n_lines
    out["fineweb_line_punct_ratio"] = _ratio(sum(1 for s in lines if s.endswith(TERMINAL_PUNCT)), n_lines)
    out["fineweb_short_line_ratio"] = _ratio(sum(1 for s in lines if len(s) <= FINEWEB_SHORT_LINE_LENGTH), n_lines)
    non_empty = [s for s in lines if s.strip()]
    out["fineweb_char_dup_ratio"] = _ratio(_dup_count_and_chars(non_empty)[1], len(text) - (n_lines - 1))
    out["fineweb_newline_ratio"] = _ratio(n_lines - 1, n_tokens)


def _fineweb2_signals(text: str, n_tokens: int, out: dict) -> None:
    lines = [s for s in text.split("\n") if s.strip()]
    n_lines = len(lines)
    out["fineweb_n_lines"] = n_lines
    out["fineweb_line_punct_ratio"] = _ratio(sum(1 for s in lines if s.endswith(MULTILINGUAL_TERMINAL_PUNCT)), n_lines)
    out["fineweb_short_line_ratio"] = _ratio(sum(1 for s in lines if len(s) <= FINEWEB_SHORT_LINE_LENGTH), n_lines)
    out["fineweb_char_dup_ratio"] = _ratio(_dup_count_and_chars(lines)[1], len(text) - text.count("\n"))
    out["fineweb_newline_ratio"] = _ratio(text.count("\n"), n_tokens)


def _count_stop_words(counts: Counter, stop: frozenset[str]) -> int:
    """Tokens that are stop words, ``’`` read as ``'``, from ``Counter(tokens)``: each distinct token is looked
    up once (a page repeats its words)."""
    return sum(n for t, n in counts.items() if t in stop or ("’" in t and t.replace("’", "'") in stop))


def quality_signals(text: str, words: WordRules | None = None) -> dict[str, float | int]:
    """Every Gopher/C4/FineWeb signal of ``text`` as a flat dict; keys and types are QUALITY_SIGNAL_TYPES.
    ``words``: a language's tokenizer and stop words (FineWeb-2's way, see the module doc); None: English."""
    out: dict[str, float | int] = {}
    if words is not None:
        tokens = words.tokenize(text)
        _repetition_signals(text, tokens, out)
        counts = Counter(tokens)
        _gopher_quality_signals(text, tokens, counts, out)
        out["gopher_n_stop_words"] = _count_stop_words(counts, words.stop_words)
        _c4_lines(text, out)
        _fineweb2_signals(text, len(tokens), out)
        return out
    tokens = TOKEN_RE.findall(text)
    _repetition_signals(text, tokens, out)
    _gopher_quality_signals(text, tokens, Counter(tokens), out)
    c4 = _c4_lines(text, out)
    _fineweb_signals(c4.text, c4.n_tokens(len(tokens)), out)
    return out


@dataclass(frozen=True)
class QualityThresholds:
    """Every threshold of quality_decision, defaulting to the published values; ``None`` disables a rule."""

    gopher_rep_max_dup_para_frac: float | None = knob(0.3, "Gopher: max share of duplicate paragraphs")
    gopher_rep_max_dup_para_char_frac: float | None = knob(
        0.2, "Gopher: max share of characters in duplicate paragraphs"
    )
    gopher_rep_max_dup_line_frac: float | None = knob(0.3, "Gopher: max share of duplicate lines")
    gopher_rep_max_dup_line_char_frac: float | None = knob(0.2, "Gopher: max share of characters in duplicate lines")
    gopher_rep_max_top_2gram_char_frac: float | None = knob(0.20, "Gopher: max character share of the top 2-gram")
    gopher_rep_max_top_3gram_char_frac: float | None = knob(0.18, "Gopher: max character share of the top 3-gram")
    gopher_rep_max_top_4gram_char_frac: float | None = knob(0.16, "Gopher: max character share of the top 4-gram")
    gopher_rep_max_dup_5gram_char_frac: float | None = knob(0.15, "Gopher: max character share of duplicate 5-grams")
    gopher_rep_max_dup_6gram_char_frac: float | None = knob(0.14, "Gopher: max character share of duplicate 6-grams")
    gopher_rep_max_dup_7gram_char_frac: float | None = knob(0.13, "Gopher: max character share of duplicate 7-grams")
    gopher_rep_max_dup_8gram_char_frac: float | None = knob(0.12, "Gopher: max character share of duplicate 8-grams")
    gopher_rep_max_dup_9gram_char_frac: float | None = knob(0.11, "Gopher: max character share of duplicate 9-grams")
    gopher_rep_max_dup_10gram_char_frac: float | None = knob(0.10, "Gopher: max character share of duplicate 10-grams")

    gopher_min_words: int | None = knob(50, "Gopher: min non-symbol words")
    gopher_max_words: int | None = knob(100_000, "Gopher: max non-symbol words")
    gopher_min_mean_word_len: float | None = knob(3, "Gopher: min mean word length")
    gopher_max_mean_word_len: float | None = knob(10, "Gopher: max mean word length")
    gopher_max_hash_ratio: float | None = knob(0.1, "Gopher: max '#' per token")
    gopher_max_ellipsis_ratio: float | None = knob(0.1, "Gopher: max ellipses per token")
    gopher_max_bullet_line_frac: float | None = knob(0.9, "Gopher: max share of lines starting with a bullet")
    gopher_max_ellipsis_line_frac: float | None = knob(0.3, "Gopher: max share of lines ending in an ellipsis")
    gopher_min_alpha_token_frac: float | None = knob(0.8, "Gopher: min share of tokens with a letter")
    gopher_min_stop_words: int | None = knob(2, "Gopher: min stop words")

    c4_filter_no_terminal_punct: bool = knob(
        False, "C4: only lines ending in terminal punctuation count (the C4 paper's setting; FineWeb runs without it)"
    )
    c4_max_lorem_ipsum_lines: int | None = knob(0, "C4: max 'lorem ipsum' lines")
    c4_max_curly_bracket_lines: int | None = knob(0, "C4: max lines with a curly bracket")
    c4_min_sentences: int | None = knob(5, "C4: min sentences")

    fineweb_min_line_punct_ratio: float | None = knob(
        0.12, "FineWeb: dropped when the share of lines ending in punctuation is <= this"
    )
    fineweb_line_punct_exclude_zero: bool = knob(False, "FineWeb: a line punctuation ratio of 0 does not drop")
    fineweb_max_short_line_ratio: float | None = knob(0.67, "FineWeb: dropped when the share of short lines is >= this")
    fineweb_max_char_dup_ratio: float | None = knob(
        0.01, "FineWeb: dropped when the character share of duplicate lines is >= this"
    )
    fineweb_max_newline_ratio: float | None = knob(0.3, "FineWeb: max newlines per token")

    per_language: bool = knob(
        True,
        "a document lid.176 puts in another language than English is judged by that language's rules "
        "(language_rules.py: FineWeb-2's thresholds, word segmentation and stop words); false: English rules for all",
    )
    language_rules: str = knob(
        LANGUAGE_RULES_TABLE, "the per-language rules table these thresholds were approved with (its content hash)"
    )


# (reason, signal, comparison that means "drop", threshold field); "_terminal" marks the c4 signals whose
# *_terminal variant is read when c4_filter_no_terminal_punct is on.
_RULES: tuple[tuple[str, str, str, str], ...] = (
    ("gopher_rep_dup_para_frac", "gopher_rep_dup_para_frac", ">", "gopher_rep_max_dup_para_frac"),
    ("gopher_rep_dup_para_char_frac", "gopher_rep_dup_para_char_frac", ">", "gopher_rep_max_dup_para_char_frac"),
    ("gopher_rep_dup_line_frac", "gopher_rep_dup_line_frac", ">", "gopher_rep_max_dup_line_frac"),
    ("gopher_rep_dup_line_char_frac", "gopher_rep_dup_line_char_frac", ">", "gopher_rep_max_dup_line_char_frac"),
    *(
        (
            f"gopher_rep_top_{n}gram_char_frac",
            f"gopher_rep_top_{n}gram_char_frac",
            ">",
            f"gopher_rep_max_top_{n}gram_char_frac",
        )
        for n in TOP_NGRAM_SIZES
    ),
    *(
        (
            f"gopher_rep_dup_{n}gram_char_frac",
            f"gopher_rep_dup_{n}gram_char_frac",
            ">",
            f"gopher_rep_max_dup_{n}gram_char_frac",
        )
        for n in DUP_NGRAM_SIZES
    ),
    ("gopher_quality_n_words_low", "gopher_n_words", "<", "gopher_min_words"),
    ("gopher_quality_n_words_high", "gopher_n_words", ">", "gopher_max_words"),
    ("gopher_quality_mean_word_len_low", "gopher_mean_word_len", "<", "gopher_min_mean_word_len"),
    ("gopher_quality_mean_word_len_high", "gopher_mean_word_len", ">", "gopher_max_mean_word_len"),
    ("gopher_quality_hash_ratio", "gopher_hash_ratio", ">", "gopher_max_hash_ratio"),
    ("gopher_quality_ellipsis_ratio", "gopher_ellipsis_ratio", ">", "gopher_max_ellipsis_ratio"),
    ("gopher_quality_bullet_line_frac", "gopher_bullet_line_frac", ">", "gopher_max_bullet_line_frac"),
    ("gopher_quality_ellipsis_line_frac", "gopher_ellipsis_line_frac", ">", "gopher_max_ellipsis_line_frac"),
    ("gopher_quality_alpha_token_frac", "gopher_alpha_token_frac", "<", "gopher_min_alpha_token_frac"),
    ("gopher_quality_stop_words", "gopher_n_stop_words", "<", "gopher_min_stop_words"),
    ("c4_lorem_ipsum", "c4_n_lines_lorem_ipsum_terminal", ">", "c4_max_lorem_ipsum_lines"),
    ("c4_curly_bracket", "c4_n_lines_curly_bracket_terminal", ">", "c4_max_curly_bracket_lines"),
    ("c4_n_sentences", "c4_n_sentences_terminal", "<", "c4_min_sentences"),
    ("fineweb_line_punct_ratio", "fineweb_line_punct_ratio", "<=", "fineweb_min_line_punct_ratio"),
    ("fineweb_short_line_ratio", "fineweb_short_line_ratio", ">=", "fineweb_max_short_line_ratio"),
    ("fineweb_char_dup_ratio", "fineweb_char_dup_ratio", ">=", "fineweb_max_char_dup_ratio"),
    ("fineweb_newline_ratio", "fineweb_newline_ratio", ">", "fineweb_max_newline_ratio"),
)

QUALITY_REASONS: tuple[str, ...] = tuple(rule[0] for rule in _RULES)

_DROPS = {
    ">": lambda v, lim: v > lim,
    ">=": lambda v, lim: v >= lim,
    "<": lambda v, lim: v < lim,
    "<=": lambda v, lim: v <= lim,
}


def quality_failures(signals: Mapping, t: QualityThresholds = QualityThresholds()) -> list[str]:
    """Every rule (in QUALITY_REASONS order) that ``signals`` fail under ``t``; the first is the decision."""
    return list(_failures(signals, t))


def quality_decision(signals: Mapping, t: QualityThresholds = QualityThresholds()) -> str | None:
    """The first rule (in QUALITY_REASONS order) that ``signals`` fail under ``t``, or None when kept."""
    return next(_failures(signals, t), None)


@lru_cache(maxsize=256)  # built once per thresholds: quality_decision runs once per document
def quality_rules(t: QualityThresholds) -> tuple[tuple[str, str, Callable], ...]:
    """The rules ``t`` enables, in QUALITY_REASONS order, as (reason, signal, drops): ``signal`` is the one the
    rule reads under ``t`` and ``drops(value)`` whether that value drops the document. ``drops`` takes a number
    or a polars expression of the signal's column alike, so the governance dry-run applies these same rules."""
    rules = []
    for reason, signal, op, field in _RULES:
        limit = getattr(t, field)
        if limit is None:
            continue
        if signal.endswith("_terminal") and not t.c4_filter_no_terminal_punct:
            signal = signal[: -len("_terminal")]
        exclude_zero = reason == "fineweb_line_punct_ratio" and t.fineweb_line_punct_exclude_zero
        rules.append((reason, signal, _drops(_DROPS[op], limit, exclude_zero)))
    return tuple(rules)


def _drops(compare: Callable, limit: float, exclude_zero: bool) -> Callable:
    if exclude_zero:  # FineWeb's punctuation rule spares a text with no line ending in punctuation at all
        return lambda v: compare(v, limit) & (v != 0)
    return lambda v: compare(v, limit)


def _failures(signals: Mapping, t: QualityThresholds) -> Iterator[str]:
    for reason, signal, drops in quality_rules(t):
        try:
            value = signals[signal]
        except KeyError:
            raise KeyError(
                f"quality signal {signal!r} missing; pass the full dict from quality_signals() "
                f"(columns: QUALITY_SIGNAL_TYPES)"
            ) from None
        if drops(value):
            yield reason
