"""Per-language quality rules: which thresholds, word segmentation and stop words judge a document, chosen by
the language lid.176 gave it. No Dagster here.

- English (``en``), and every language when ``QualityThresholds.per_language`` is off: the English rules of
  ``quality.py`` (Gopher, C4, FineWeb), exactly as before.
- A language with a FineWeb-2 configuration carried in ``data/language_rules/fineweb2/`` (copies of
  ``configs/<lang>_<Script>.yml`` of github.com/huggingface/fineweb-2, provenance in that folder's README):
  FineWeb-2's per-language pipeline (``fineweb-2-pipeline.py``): Gopher repetition with the language's
  ``dup_line_frac``, ``top_n_grams`` and ``dup_n_grams`` (paragraph and line-character rules off); FineWeb
  quality with the language's ``line_punct_thr`` (0 = off) and ``new_line_ratio``, ``char_duplicates_ratio``
  0.1 and the short-line rule off; Gopher quality with the language's word-length bounds,
  ``max_non_alpha_words_ratio`` (our ``gopher_min_alpha_token_frac``) and stop words (at least 2); no C4
  rules. Every other threshold (minimum words, ``#`` and ellipsis ratios, bullets) comes from the policy.
- Any other language: ``default`` rules, the same structure with datatrove's default values; stop words from
  ``stopwordsiso`` when it has the language (else the stop-word rule is off); for scripts written without
  spaces (``CHAR_SCRIPT_LANGUAGES``) every character of those scripts is a word and the word-length bounds
  are off.

Word segmentation: ``jieba`` (zh), ``sudachipy`` + ``sudachidict-core`` (ja, split mode A, as spaCy's ``ja``
that datatrove uses), ``kiwipiepy`` (ko, morpheme forms), ``pythainlp`` (th, ``newmm``); every other
language uses ``WORD_TOKEN_RE`` (``quality.TOKEN_RE`` with combining marks kept inside words, so Hindi or
Bengali words are not cut at their vowel signs), with an elision split (``l'homme`` -> ``l'`` ``homme``) for
languages whose stop words end in an apostrophe (fr, it). The segmenters are dependencies: a missing one raises
instead of silently changing decisions.

FineWeb-2's ``language_score`` is carried but not applied: it was calibrated on GlotLID's scores, and ours
come from lid.176, so the policy's ``language_threshold`` stays the only language-score gate.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from assets.curated.quality import (
    DUP_NGRAM_SIZES,
    LANGUAGE_RULES_TABLE,
    TOP_NGRAM_SIZES,
    QualityThresholds,
    WordRules,
)

__all__ = [
    "DEFAULT_RULES",
    "ENGLISH",
    "LID_TO_FINEWEB2",
    "LanguageRules",
    "check_rules_table",
    "fineweb2_config",
    "rules_for",
    "rules_table_id",
    "thresholds_for",
]

RULES_DIR = Path(__file__).resolve().parents[2] / "data" / "language_rules" / "fineweb2"
ENGLISH = "en"
DEFAULT_RULES = "default"
# lid.176 label -> FineWeb-2 configuration carried in RULES_DIR
LID_TO_FINEWEB2 = {
    "ar": "arb_Arab",
    "bn": "ben_Beng",
    "cs": "ces_Latn",
    "da": "dan_Latn",
    "de": "deu_Latn",
    "el": "ell_Grek",
    "es": "spa_Latn",
    "fi": "fin_Latn",
    "fr": "fra_Latn",
    "he": "heb_Hebr",
    "hi": "hin_Deva",
    "hu": "hun_Latn",
    "id": "ind_Latn",
    "it": "ita_Latn",
    "ja": "jpn_Jpan",
    "ko": "kor_Hang",
    "ms": "zsm_Latn",
    "nl": "nld_Latn",
    "no": "nob_Latn",
    "pl": "pol_Latn",
    "pt": "por_Latn",
    "ro": "ron_Latn",
    "ru": "rus_Cyrl",
    "sv": "swe_Latn",
    "th": "tha_Thai",
    "tr": "tur_Latn",
    "uk": "ukr_Cyrl",
    "vi": "vie_Latn",
    "zh": "cmn_Hani",
}
SEGMENTERS = {"zh": "jieba", "ja": "sudachi", "ko": "kiwi", "th": "pythainlp"}
# lid.176 labels of languages written without spaces that have no segmenter here: character-based words.
CHAR_SCRIPT_LANGUAGES = frozenset({"yue", "wuu", "lo", "km", "my", "bo", "dz"})
FINEWEB2_CHAR_DUP_RATIO = 0.1
FINEWEB2_MIN_STOP_WORDS = 2
# datatrove's defaults: what a language without its own configuration gets
DEFAULT_CONFIG: Mapping = {
    "dup_line_frac": 0.3,
    "top_n_grams": [[2, 0.2], [3, 0.18], [4, 0.16]],
    "dup_n_grams": [[5, 0.15], [6, 0.14], [7, 0.13], [8, 0.12], [9, 0.11], [10, 0.10]],
    "line_punct_thr": 0.12,
    "new_line_ratio": 0.3,
    "min_avg_word_length": 3,
    "max_avg_word_length": 10,
    "max_non_alpha_words_ratio": 0.8,
}

_NO_SPACE_CHARS = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u0f00-\u0fff"  # Thai, Lao, Myanmar, Khmer, Tibetan
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"  # kana, Han, Hangul
)
# Combining marks (Unicode category M*, BMP) belong to the word they follow: Python's \w has no marks, so
# quality.TOKEN_RE cuts Hindi "में" into "म" and two symbols. The other languages' tokenizers keep them.
_MARKS = "".join(re.escape(chr(c)) for c in range(0x300, 0x10000) if unicodedata.category(chr(c)).startswith("M"))
_W = rf"[\w{_MARKS}]"
# WORD_TOKEN_RE's tokens are those of rf"\w{_W}*(?:['’.\-]{_W}+)*|\.{{2,}}|[^\w\s]" and ELISION_TOKEN_RE's those of
# rf"\w{_W}*['’](?=\w)|\w{_W}*(?:[.\-]{_W}+)*|\.{{2,}}|[^\w\s]", written as quality.TOKEN_RE is: one leading \S (every
# token starts with one), then the branch its first character selects. re skips white space with a fast class
# scan instead of trying each branch at every position (~20% less CPU on the German pages, the same tokens).
WORD_TOKEN_RE = re.compile(rf"\S(?:(?<=\w){_W}*(?:['’.\-]{_W}+)*|(?<=\.)\.+|)")
CHAR_TOKEN_RE = re.compile(rf"[{_NO_SPACE_CHARS}]|(?:(?![{_NO_SPACE_CHARS}]){_W})+(?:['’.\-]{_W}+)*|\.{{2,}}|[^\w\s]")
ELISION_TOKEN_RE = re.compile(rf"\S(?:(?<=\w){_W}*['’](?=\w)|(?<=\w){_W}*(?:[.\-]{_W}+)*|(?<=\.)\.+|)")


@dataclass(frozen=True)
class LanguageRules:
    """The rules one document is judged by; ``name`` is what curated.documents.quality_rules records."""

    name: str
    words: WordRules | None  # None: English tokenization and stop words
    thresholds: QualityThresholds


def rules_table_id() -> str:
    """The carried table's identity: ``fineweb2:`` + sha256 of its files (name and bytes, sorted), 12 hex."""
    h = hashlib.sha256()
    for path in sorted(RULES_DIR.glob("*.yml")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"fineweb2:{h.hexdigest()[:12]}"


def check_rules_table(t: QualityThresholds) -> None:
    """Refuse thresholds approved with another rules table than the one this code carries."""
    if t.per_language and t.language_rules != LANGUAGE_RULES_TABLE:
        raise ValueError(
            f"the thresholds name per-language rules table {t.language_rules!r}, this code carries "
            f"{LANGUAGE_RULES_TABLE!r}: propose a thresholds policy for the new table (or set per_language off)"
        )


@lru_cache(maxsize=64)
def fineweb2_config(language: str) -> dict | None:
    """The FineWeb-2 configuration carried for a lid.176 language, or None."""
    import yaml

    name = LID_TO_FINEWEB2.get(language)
    if name is None:
        return None
    return yaml.safe_load((RULES_DIR / f"{name}.yml").read_text(encoding="utf-8"))


def thresholds_for(base: QualityThresholds, config: Mapping, char_words: bool = False) -> QualityThresholds:
    """``base`` with the FineWeb-2 pipeline's thresholds for one language configuration (module doc)."""
    top, dup = dict(config["top_n_grams"]), dict(config["dup_n_grams"])
    return replace(
        base,
        gopher_rep_max_dup_para_frac=None,
        gopher_rep_max_dup_para_char_frac=None,
        gopher_rep_max_dup_line_frac=config["dup_line_frac"],
        gopher_rep_max_dup_line_char_frac=None,
        **{f"gopher_rep_max_top_{n}gram_char_frac": top[n] for n in TOP_NGRAM_SIZES},
        **{f"gopher_rep_max_dup_{n}gram_char_frac": dup[n] for n in DUP_NGRAM_SIZES},
        gopher_min_mean_word_len=None if char_words else config["min_avg_word_length"],
        gopher_max_mean_word_len=None if char_words else config["max_avg_word_length"],
        gopher_min_alpha_token_frac=config["max_non_alpha_words_ratio"],
        c4_max_lorem_ipsum_lines=None,
        c4_max_curly_bracket_lines=None,
        c4_min_sentences=None,
        fineweb_min_line_punct_ratio=config["line_punct_thr"] or None,
        fineweb_max_short_line_ratio=None,
        fineweb_max_char_dup_ratio=FINEWEB2_CHAR_DUP_RATIO,
        fineweb_max_newline_ratio=config["new_line_ratio"],
    )


@lru_cache(maxsize=512)
def rules_for(language: str | None, base: QualityThresholds) -> LanguageRules:
    """The rules a document in ``language`` is judged by under the policy's thresholds ``base``."""
    if not base.per_language or language in (ENGLISH, None):
        return LanguageRules(ENGLISH, None, base)
    config = fineweb2_config(language)
    if config is not None:
        tokenize = _segmenter(language, config["stopwords"])
        words = WordRules(tokenize, frozenset(config["stopwords"]))
        return LanguageRules(language, words, thresholds_for(base, config))
    char_words = language in CHAR_SCRIPT_LANGUAGES
    stop = _stopwordsiso(language)
    words = WordRules(CHAR_TOKEN_RE.findall if char_words else WORD_TOKEN_RE.findall, stop or frozenset())
    t = thresholds_for(base, DEFAULT_CONFIG, char_words)
    return LanguageRules(DEFAULT_RULES, words, t if stop else replace(t, gopher_min_stop_words=None))


def _stopwordsiso(language: str) -> frozenset[str] | None:
    import stopwordsiso

    return frozenset(stopwordsiso.stopwords(language)) if stopwordsiso.has_lang(language) else None


def _segmenter(language: str, stop_words: list[str]) -> Callable[[str], list[str]]:
    kind = SEGMENTERS.get(language)
    if kind is not None:
        return _LOADERS[kind]()
    if any(w.endswith("'") for w in stop_words):
        return ELISION_TOKEN_RE.findall
    return WORD_TOKEN_RE.findall


# ---- segmenters: loaded once per process, on the first document that needs one ---------------------------


@lru_cache(maxsize=1)
def _jieba() -> Callable[[str], list[str]]:
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    tok = jieba.Tokenizer()
    if not _load_jieba_cache(tok):
        tok.initialize()  # builds the prefix dictionary and writes jieba's cache for the next process

    def tokenize(text: str) -> list[str]:
        return [w for w in tok.lcut(text) if not w.isspace()]

    return tokenize


def _load_jieba_cache(tok) -> bool:
    """Load the default dictionary's prefix dictionary from the cache `jieba.Tokenizer.initialize` writes (the
    same file, `tok.cache_file` or "jieba.cache" in `tok.tmp_dir` or the temp dir, and the same validity rule:
    the default dictionary's cache is used when present), with one
    `marshal.loads` of its bytes instead of jieba's `marshal.load` on the open file, which reads it object by
    object (9 MB: 0.95 against 0.33 CPU s). False when there is no usable cache (jieba then builds it)."""
    import marshal
    import tempfile

    import jieba

    if tok.dictionary != jieba.DEFAULT_DICT:
        return False
    try:
        cache = Path(tok.tmp_dir or tempfile.gettempdir(), tok.cache_file or "jieba.cache")
        freq, total = marshal.loads(cache.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return False
    if not isinstance(freq, dict) or not isinstance(total, int) or not freq:
        return False
    tok.FREQ, tok.total, tok.initialized = freq, total, True
    return True


# Sudachi refuses inputs over ~49 KB; lines are cut to this many characters (UTF-8 is at most 4 bytes each).
_SUDACHI_MAX_CHARS = 12_000


@lru_cache(maxsize=1)
def _sudachi() -> Callable[[str], list[str]]:
    from sudachipy import Dictionary, SplitMode

    tok = Dictionary(dict="core").tokenizer(mode=SplitMode.A)

    def tokenize(text: str) -> list[str]:
        out: list[str] = []
        for line in text.split("\n"):
            for i in range(0, len(line), _SUDACHI_MAX_CHARS):
                out += [m.surface() for m in tok.tokenize(line[i : i + _SUDACHI_MAX_CHARS])]
        return [w for w in out if w and not w.isspace()]

    return tokenize


@lru_cache(maxsize=1)
def _kiwi() -> Callable[[str], list[str]]:
    import warnings

    from kiwipiepy import Kiwi

    with warnings.catch_warnings():  # "num_workers=0 changed in 0.21": it now means one thread, as wanted here
        warnings.simplefilter("ignore", DeprecationWarning)
        kiwi = Kiwi(num_workers=0)

    def tokenize(text: str) -> list[str]:
        return [t.form for t in kiwi.tokenize(text)]

    return tokenize


@lru_cache(maxsize=1)
def _thai() -> Callable[[str], list[str]]:
    from pythainlp.tokenize import word_tokenize

    def tokenize(text: str) -> list[str]:
        return [w for w in word_tokenize(text, engine="newmm", keep_whitespace=False) if not w.isspace()]

    return tokenize


_LOADERS: dict[str, Callable[[], Callable[[str], list[str]]]] = {
    "jieba": _jieba,
    "sudachi": _sudachi,
    "kiwi": _kiwi,
    "pythainlp": _thai,
}
