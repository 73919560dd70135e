"""The models curation runs on: the reference n-gram LM (perplexity) and the validation of language ID on a
labelled set. No Dagster."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa

from assets.curated.langid import DEFAULT_LANG_THRESHOLD, LanguageIdentifier, bundled_model_path, langid_validation
from assets.knobs import knob
from iceberg_catalog import CommitResult, Lakehouse, Provenance
from iceberg_catalog.schemas import CURATED_LANGID_VALIDATION

REPO_ROOT = Path(__file__).resolve().parents[2]
REFERENCE_CORPUS = REPO_ROOT / "data" / "corpus" / "enwiki_excerpt_clean_104articles.txt.xz"
LANGID_LABELLED = REPO_ROOT / "data" / "langid" / "sentences.tsv"


@dataclass(frozen=True)
class ReferenceLMParams:
    """Modified Kneser-Ney n-gram model estimated from a reference corpus kept in the repo."""

    order: int = knob(3, "n-gram order of the model")
    corpus_path: str = knob(
        str(REFERENCE_CORPUS), "reference corpus, .txt or .txt.xz (<doc ...>/</doc> lines are skipped)"
    )


@dataclass(frozen=True)
class LangidValidationParams:
    """Validation of the language identifier on labelled sentences."""

    threshold: float = knob(
        DEFAULT_LANG_THRESHOLD, "a prediction under this score counts as 'unknown' (the curation threshold)"
    )
    labelled_path: str = knob(str(LANGID_LABELLED), "TSV of labelled sentences: lang<TAB>sentence, with a header")
    min_precision: float = knob(
        0.95, "languages under this precision are named in the metadata and warned about by the check"
    )

    def hashed(self) -> dict:
        """The snapshot's config hash covers every knob (as it always has)."""
        return asdict(self)


def read_labelled(path: str) -> list[tuple[str, str]]:
    """(text, gold language) pairs from the repo's TSV (`lang<TAB>sentence`, with a header)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            lang, _, text = line.rstrip("\n").partition("\t")
            if text:
                rows.append((text, lang))
    return rows


def validate_langid(params: LangidValidationParams) -> tuple[list[dict], int]:
    """Rows of curated.langid_validation: per language (last: 'macro') precision, recall, f1 and share under the
    threshold on the labelled set; and the set's size."""
    labelled = read_labelled(params.labelled_path)
    model = Path(bundled_model_path()).name
    rows = [
        {
            "language": r["lang"],
            "n": r["n"],
            "precision": r["precision"],
            "recall": r["recall"],
            "f1": r["f1"],
            "unknown_share": r["unknown_share"],
            "threshold": params.threshold,
            "model": model,
        }
        for r in langid_validation(LanguageIdentifier(), labelled, threshold=params.threshold)
    ]
    return rows, len(labelled)


def commit_validation(lakehouse: Lakehouse, rows: list[dict], provenance: Provenance) -> CommitResult:
    """Replace curated.langid_validation with `rows` (one transaction)."""
    writer = lakehouse.writer(CURATED_LANGID_VALIDATION, {})
    writer.write(pa.Table.from_pylist(rows))
    return writer.commit(provenance)


def weak_languages(rows: list[dict], min_precision: float) -> dict[str, float]:
    """Languages (not 'macro') whose precision is under `min_precision`, with their precision."""
    return {r["language"]: r["precision"] for r in rows if r["language"] != "macro" and r["precision"] < min_precision}
