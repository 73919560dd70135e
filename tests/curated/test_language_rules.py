"""Per-language quality rules (assets/curated/language_rules.py): FineWeb-2's thresholds, segmenters and stop
words per language; English unchanged; the rules that judged a document are recorded; the policy names the
rules table. The texts below were written for these tests."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
import yaml

from assets.curated import defs as curated_defs
from assets.curated.language_rules import (
    DEFAULT_RULES,
    LID_TO_FINEWEB2,
    RULES_DIR,
    _load_jieba_cache,
    check_rules_table,
    fineweb2_config,
    rules_for,
    rules_table_id,
)
from assets.curated.pipeline import CurateParams, DocumentCurator
from assets.curated.quality import (
    LANGUAGE_RULES_TABLE,
    QUALITY_SIGNAL_TYPES,
    QualityThresholds,
    quality_decision,
    quality_signals,
)

GERMAN = (
    "Die Stadtbibliothek öffnet im Frühjahr eine neue Abteilung für Kinder und Jugendliche. Nach Angaben der "
    "Leiterin wurden dafür mehr als zweitausend Bücher angeschafft, darunter Romane, Sachbücher und Comics. Die "
    "Räume im Erdgeschoss wurden vollständig renoviert und mit hellen Möbeln ausgestattet.\n"
    "Besonders stolz ist das Team auf die kleine Werkstatt, in der Schülerinnen und Schüler eigene Hörspiele "
    "aufnehmen können. Für die Geräte hat ein örtlicher Verein Geld gesammelt. An den Wochenenden lesen "
    "ehrenamtliche Helfer aus bekannten Märchen vor, und einmal im Monat stellt eine Autorin ihre Arbeit vor.\n"
    "Die Stadt rechnet mit deutlich mehr Besuchern als im vergangenen Jahr. Der Eintritt bleibt kostenlos, nur "
    "für die Ausleihe von Filmen wird eine geringe Gebühr verlangt. Wer Fragen hat, kann sich telefonisch oder "
    "persönlich an die Information im ersten Stock wenden."
)
CHINESE = (
    "今年春天，市图书馆为儿童和青少年开设了一个新的阅览区。据馆长介绍，图书馆为此购买了两千多本新书，其中包括小说、"
    "科普读物和漫画。一楼的房间经过全面翻修，配备了明亮的家具。\n"
    "工作人员特别自豪的是一个小型录音室，学生们可以在那里录制自己的广播剧。设备的费用由当地一个协会筹集。每到周末，"
    "志愿者会为孩子们朗读有名的童话故事，每个月还有一位作家来介绍她的作品。\n"
    "市政府预计今年的读者人数会比去年明显增加。入场仍然免费，只有借阅电影时需要支付少量费用。如果有问题，"
    "可以打电话或者到二楼的服务台咨询。"
)
ENGLISH = (
    "The city library opens a new section for children and young people in the spring. According to the head "
    "librarian, more than two thousand books were bought for it, including novels, non-fiction and comics. The "
    "rooms on the ground floor have been completely renovated and furnished with bright furniture.\n"
    "The team is particularly proud of the small workshop where pupils can record their own radio plays. A local "
    "association raised the money for the equipment. At weekends volunteers read well-known fairy tales aloud, "
    "and once a month an author presents her work to the visitors who come to the reading room.\n"
    "The city expects clearly more visitors than last year. Entry remains free; only borrowing films costs a "
    "small fee. Anyone with questions can call or ask at the information desk on the first floor."
)


def test_rules_table_is_pinned_to_the_carried_files():
    """The id the policy carries is the hash of the carried files: editing them without updating it fails here."""
    assert rules_table_id() == LANGUAGE_RULES_TABLE
    for lang, config in LID_TO_FINEWEB2.items():
        assert (RULES_DIR / f"{config}.yml").exists(), lang
    assert (RULES_DIR.parent / "SOURCES.md").exists()


def test_english_rules_are_the_unchanged_english_path():
    t = QualityThresholds()
    rules = rules_for("en", t)
    assert (rules.name, rules.words, rules.thresholds) == ("en", None, t)
    assert quality_signals(ENGLISH, rules.words) == quality_signals(ENGLISH)
    assert quality_decision(quality_signals(ENGLISH), t) is None


def test_per_language_off_judges_every_language_by_the_english_rules():
    t = QualityThresholds(per_language=False)
    for lang in ("de", "zh", "ca", "yue"):
        assert rules_for(lang, t).name == "en"
        assert rules_for(lang, t).words is None
    assert quality_decision(quality_signals(GERMAN), t) == "gopher_quality_stop_words"


def test_german_is_kept_by_its_own_rules_and_dropped_by_the_english_ones():
    rules = rules_for("de", QualityThresholds())
    signals = quality_signals(GERMAN, rules.words)
    assert set(signals) == set(QUALITY_SIGNAL_TYPES)
    assert signals["gopher_n_stop_words"] >= 10  # der, und, die, im, für, ...
    assert quality_decision(signals, rules.thresholds) is None
    assert quality_decision(quality_signals(GERMAN), QualityThresholds()) == "gopher_quality_stop_words"


def test_chinese_is_segmented_into_words():
    rules = rules_for("zh", QualityThresholds())
    words = rules.words.tokenize(CHINESE)
    assert "图书馆" in words and "的" in words
    signals = quality_signals(CHINESE, rules.words)
    # whitespace/regex words: one per run between punctuation, far under Gopher's 50
    assert quality_signals(CHINESE)["gopher_n_words"] < 50 <= signals["gopher_n_words"]
    assert 1 <= signals["gopher_mean_word_len"] <= 5
    assert quality_decision(signals, rules.thresholds) is None
    assert quality_decision(quality_signals(CHINESE), QualityThresholds()) == "gopher_quality_n_words_low"


def test_jieba_from_its_cache_segments_as_jieba_itself(tmp_path, monkeypatch):
    """The prefix dictionary read from jieba's cache by one `marshal.loads` is the one jieba builds and loads
    itself; without a usable cache (none, or a corrupt one) jieba's own `initialize` runs."""
    import tempfile

    import jieba

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # jieba's cache lives in gettempdir()
    fresh = jieba.Tokenizer()
    assert not _load_jieba_cache(fresh)  # no cache yet
    fresh.initialize()  # builds the dictionary and writes tmp_path/jieba.cache
    assert (tmp_path / "jieba.cache").is_file()
    cached = jieba.Tokenizer()
    assert _load_jieba_cache(cached) and cached.initialized
    assert cached.total == fresh.total and cached.FREQ == fresh.FREQ
    assert cached.lcut(CHINESE) == fresh.lcut(CHINESE)
    (tmp_path / "jieba.cache").write_bytes(b"\x00not marshal")
    assert not _load_jieba_cache(jieba.Tokenizer())


@pytest.mark.parametrize(
    "lang, text, expected",
    [
        ("ja", "私は毎朝、駅の近くの喫茶店でコーヒーを飲みます。", {"の", "を", "で"}),
        ("ko", "저는 서울에서 한국어를 공부하고 있습니다.", {"에서", "를"}),
        ("th", "ฉันอยู่ที่กรุงเทพและเป็นนักเรียน", {"ที่", "และ", "เป็น"}),
        ("fr", "L'homme parle de l’école et d'un livre.", {"l'", "de", "d'", "et"}),
        # combining marks stay in their word (quality.TOKEN_RE would cut "में" into "म" and two symbols)
        ("hi", "भारत में कई भाषाएँ बोली जाती हैं और हिंदी उनमें से एक है।", {"में", "हैं", "और", "से", "एक", "है"}),
    ],
)
def test_segmenters_find_the_languages_stop_words(lang, text, expected):
    rules = rules_for(lang, QualityThresholds())
    tokens = rules.words.tokenize(text)
    assert len(tokens) > len(text.split())
    found = {t.replace("’", "'") for t in tokens} & rules.words.stop_words
    assert expected <= found, (tokens, found)


def test_thresholds_come_from_the_fineweb2_config():
    config = yaml.safe_load((RULES_DIR / "deu_Latn.yml").read_text(encoding="utf-8"))
    assert fineweb2_config("de") == config
    base = QualityThresholds(gopher_min_words=77)
    t = rules_for("de", base).thresholds
    assert t.gopher_rep_max_dup_line_frac == config["dup_line_frac"] == 0.263
    assert t.gopher_rep_max_top_2gram_char_frac == 0.169 and t.gopher_rep_max_dup_10gram_char_frac == 0.098
    assert (t.gopher_min_mean_word_len, t.gopher_max_mean_word_len) == (0, 15)
    assert t.gopher_min_alpha_token_frac == config["max_non_alpha_words_ratio"]
    assert t.fineweb_max_newline_ratio == config["new_line_ratio"]
    assert t.fineweb_min_line_punct_ratio is None  # line_punct_thr 0: FineWeb-2's `ratio < 0` never drops
    assert rules_for("zh", base).thresholds.fineweb_min_line_punct_ratio == 0.106
    assert (t.c4_min_sentences, t.c4_max_curly_bracket_lines, t.fineweb_max_short_line_ratio) == (None, None, None)
    assert t.fineweb_max_char_dup_ratio == 0.1
    assert t.gopher_min_words == 77  # what the language does not set comes from the policy


def test_languages_without_a_config_get_the_documented_defaults():
    t = QualityThresholds()
    ca = rules_for("ca", t)  # no FineWeb-2 config carried; stopwordsiso has Catalan
    assert ca.name == DEFAULT_RULES and "així" in ca.words.stop_words
    assert ca.thresholds.gopher_min_stop_words == 2 and ca.thresholds.gopher_rep_max_dup_line_frac == 0.3
    yue = rules_for("yue", t)  # written without spaces, no segmenter: one character, one word
    assert yue.words.tokenize("我哋喺香港 abc") == ["我", "哋", "喺", "香", "港", "abc"]
    assert yue.thresholds.gopher_min_mean_word_len is None
    assert rules_for("an", t).thresholds.gopher_min_stop_words is None  # no stop-word list: rule off


def test_a_policy_naming_another_rules_table_is_refused():
    check_rules_table(QualityThresholds())
    with pytest.raises(ValueError, match="rules table"):
        check_rules_table(QualityThresholds(language_rules="fineweb2:000000000000"))
    check_rules_table(QualityThresholds(per_language=False, language_rules="fineweb2:000000000000"))


def test_the_thresholds_policy_carries_the_switch_and_the_table():
    """The governance policy is built from QualityThresholds: the new fields are in it, and a policy stored
    before them (without the keys) still loads, with the English-only rules it was approved under."""
    from assets.curated.policy import thresholds_of, with_thresholds

    policy = thresholds_of(CurateParams())
    assert policy["quality"]["per_language"] is True
    assert policy["quality"]["language_rules"] == LANGUAGE_RULES_TABLE
    old = {
        **policy,
        "quality": {k: v for k, v in policy["quality"].items() if k not in ("per_language", "language_rules")},
    }
    assert with_thresholds(CurateParams(), old) == dataclasses.replace(
        CurateParams(), quality=QualityThresholds(per_language=False)
    )
    off = {**policy, "quality": {**policy["quality"], "per_language": False}}
    assert with_thresholds(CurateParams(), off).quality.per_language is False


def _record(text: str, n: int) -> dict:
    body = "".join(f"<p>{p}</p>" for p in text.split("\n"))
    html = f"<html><head><title>Bibliothek</title></head><body><article>{body}</article></body></html>".encode()
    return {
        "record_id": f"<urn:uuid:test-{n}>",
        "deletion_key": f"k{n}",
        "crawl": "TEST",
        "segment": "s",
        "target_uri": f"https://example.org/{n}",
        "host": "example.org",
        "warc_date": None,
        "http_status": 200,
        "content_type": "text/html; charset=utf-8",
        "payload": html,
        "payload_sha1": hashlib.sha1(html).hexdigest(),
    }


def test_the_funnel_records_the_rules_that_judged_each_document(reference_lm_file):
    records = [_record(GERMAN, 1), _record(CHINESE, 2), _record(ENGLISH, 3)]
    english_only = CurateParams(quality=dataclasses.replace(QualityThresholds(), per_language=False))
    with DocumentCurator(CurateParams(), reference_lm_file) as c:
        after = [c.curate(r) for r in records]
    with DocumentCurator(english_only, reference_lm_file) as c:
        before = [c.curate(r) for r in records]
    assert [r["language"] for r in after] == ["de", "zh", "en"]
    assert [r["quality_rules"] for r in after] == ["de", "zh", "en"]
    assert [r["decision"] for r in after] == [None, None, None]
    assert [r["quality_rules"] for r in before] == ["en", "en", "en"]
    assert [r["decision"] for r in before] == ["gopher_quality_stop_words", "gopher_quality_n_words_low", None]
    timing = ("extract_seconds",)  # the only column measured rather than computed
    assert {k: v for k, v in after[2].items() if k not in timing} == {
        k: v for k, v in before[2].items() if k not in timing
    }  # the English document: every other column identical


def test_the_asset_stores_the_rules_column_and_shows_rules_per_partition(
    tokenlake_home, instance, crawl_root, reference_lm_file
):
    """On the sample's Common Crawl partition (English, Chinese, German, Russian, Dutch pages): every document
    with text records the rules that judged it, English documents `en`, and the materialisation shows the
    counts per rules."""
    from tests.curated.test_curated_asset import CC_FILE, curate_segments, docs

    key = "CC-MAIN-2020-34/1596439738015.38"
    curate_segments(instance, crawl_root({key: {"a.warc.gz": CC_FILE}}), [key], reference_lm_file)
    rows = docs(("doc_id", "language", "quality_rules", "text", "kept")).to_pylist()
    assert all((r["quality_rules"] is None) == (r["text"] is None) for r in rows)
    assert {r["quality_rules"] for r in rows if r["language"] == "en"} == {"en"}
    assert {r["quality_rules"] for r in rows if r["language"] == "zh"} == {"zh"}
    md = instance.get_latest_materialization_event(curated_defs.DOCUMENTS).asset_materialization.metadata
    table = md["quality_rules"].value
    for name in {r["quality_rules"] for r in rows if r["quality_rules"]}:
        n = sum(r["quality_rules"] == name for r in rows)
        kept = sum(r["quality_rules"] == name and r["kept"] for r in rows)
        assert f"| {name} | {n} | {kept} |" in table
