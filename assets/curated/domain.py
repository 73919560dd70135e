"""The domain/topic classifier of curated documents: multinomial logistic regression over wordllama static
embeddings of the text (and, with `use_url`, of a real URL's words), plus a few cheap text features; `unknown`
when the top probability is under a confidence threshold chosen on the training side (out-of-fold predictions).
Trained from data/domain/train.jsonl.gz (data/domain/README.md), validated on data/domain/eval.jsonl: held-out
real web pages with their real URLs, labelled by reading them. Pure numpy, deterministic (no random
initialisation; folds by hash). No Dagster."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np

from assets.embeddings import EMBEDDING_MODEL, embed
from assets.knobs import knob
from iceberg_catalog import tokenlake_home

CLASSES: tuple[str, ...] = ("code", "commerce", "encyclopedic", "forum/qa", "news", "other")
UNKNOWN = "unknown"
MAX_CHARS = 2000  # the classifier reads the first MAX_CHARS characters of a text
EMBED_DIM = 256  # embed()'s dimension
MODEL_FORMAT = "tokenlake.domain_model/2"

REPO_ROOT = Path(__file__).resolve().parents[2]
DOMAIN_DATA = REPO_ROOT / "data" / "domain"
TRAIN_PATH = DOMAIN_DATA / "train.jsonl.gz"
EVAL_PATH = DOMAIN_DATA / "eval.jsonl"

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_CODE_CHARS = re.compile(r"[{}();=<>\[\]_#$\\]")
_URL_HINTS = (  # URL words that hint at a class: learned weights, not rules
    re.compile(r"forum|thread|topic|post|board|faq|question|community|review|comment"),
    re.compile(r"shop|product|produkt|cart|store|kaufen|deal|price|preis|angebot|buy"),
    re.compile(r"news|article|artikel|story|nachricht|presse|press|\d{4}/\d{2}"),
    re.compile(r"wiki|lexikon|encyclop|dictionary|glossar"),
    re.compile(r"docs?|api|github|code|python|dev|tutorial|reference"),
)
_FORUM_LINE = re.compile(r"^(re:|poster:|posted by|reply|antworten|zitat|quote)|\| (poster|replies) \|", re.I | re.M)
_PRICE = re.compile(r"(€|\$|£|¥|EUR|USD)\s?\d|\d[\d.,]*\s?(€|EUR|USD|\$)")


@dataclass(frozen=True)
class DomainModelParams:
    """Training knobs of curated/domain_model."""

    train_path: str = knob(str(TRAIN_PATH), "JSON lines (.gz) of {url, text, label} training documents")
    l2: float = knob(0.1, "L2 penalty of the logistic regression (on standardised features)")
    iterations: int = knob(150, "full-batch gradient steps (deterministic: zero initialisation)")
    learning_rate: float = knob(0.1, "gradient step size (Nesterov momentum 0.9)")
    folds: int = knob(5, "folds of the out-of-fold predictions the confidence threshold is chosen on")
    target_accuracy: float = knob(
        0.9,
        "the confidence threshold is the smallest whose confident out-of-fold predictions on the training "
        "side are at least this accurate (below it: `unknown`)",
    )
    seed: int = knob(0, "salt of the fold assignment (hash of the URL, or of the document's origin without one)")
    use_url: bool = knob(
        False,
        "read the words of a document's real (http/https) URL too; without a real URL those features are the "
        "training mean (no signal either way)",
    )

    def hashed(self) -> dict:
        return {**asdict(self), "train_path": Path(self.train_path).name}


# ---- data ---------------------------------------------------------------------------------------------------


def read_jsonl(path: str | Path) -> list[dict]:
    """Rows of a JSON-lines file (gzip when the name ends in .gz), in file order."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---- features -----------------------------------------------------------------------------------------------


def real_url(url: str | None) -> bool:
    """Whether `url` is a web address (http/https with a host): only those have words worth reading."""
    parts = urlsplit(url or "")
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def url_words(url: str | None) -> str:
    """The words of a URL's host and path ('https://www.shop.de/produkte/tee' -> 'shop de produkte tee')."""
    if not url:
        return ""
    parts = urlsplit(url if "://" in url else "http://" + url)
    host = (parts.hostname or "").removeprefix("www.")
    return " ".join(_WORD.findall(unquote(f"{host} {parts.path} {parts.query}").lower()))


def cheap_features(text: str) -> list[float]:
    """Numbers that embeddings miss: code punctuation share, table-cell share, digit share, price mentions,
    question marks per line, forum-style lines, log length."""
    t = text[:MAX_CHARS]
    n = max(len(t), 1)
    lines = max(t.count("\n") + 1, 1)
    return [
        len(_FORUM_LINE.findall(t)) / lines,
        len(_CODE_CHARS.findall(t)) / n,
        t.count("|") / n,
        sum(map(str.isdigit, t)) / n,
        min(len(_PRICE.findall(t)), 10) / 10,
        t.count("?") / lines,
        math.log1p(len(text)),
    ]


def url_features(urls: Sequence[str | None]) -> np.ndarray:
    """[URL-words embedding | one 0/1 flag per URL hint] per document; NaN for a document without a real URL
    (standardisation turns NaN into the training mean: the weights never see a made-up or missing URL)."""
    real = [real_url(u) for u in urls]
    words = [url_words(u) if r else "" for u, r in zip(urls, real)]
    hints = [[float(bool(h.search(u.lower()))) for h in _URL_HINTS] if r else [] for u, r in zip(urls, real)]
    x = np.full((len(urls), EMBED_DIM + len(_URL_HINTS)), np.nan)
    rows = [i for i, r in enumerate(real) if r]
    if rows:
        x[rows] = np.hstack([embed([words[i] for i in rows]).astype(np.float64), np.asarray([hints[i] for i in rows])])
    return x


def raw_features(texts: Sequence[str], urls: Sequence[str | None], use_url: bool) -> np.ndarray:
    """[text embedding | cheap features (| URL features)], one row per document (float64)."""
    blocks = [
        embed([t[:MAX_CHARS] for t in texts]).astype(np.float64),
        np.asarray([cheap_features(t) for t in texts], dtype=np.float64).reshape(len(texts), -1),
    ]
    return np.hstack(blocks + [url_features(urls)] if use_url else blocks)


def standardise(x: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(x - mean) / scale, a missing value (NaN: no real URL) at 0, the training mean."""
    return np.nan_to_num((x - mean) / scale, nan=0.0)


# ---- logistic regression ------------------------------------------------------------------------------------


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b by einsum's own loop (no BLAS): the same bits whatever the machine's thread count, so a model
    trained in a Ray worker equals the one the asset wrote."""
    return np.einsum("nd,dk->nk", a, b)


def fit_softmax(
    x: np.ndarray, y: np.ndarray, n_classes: int, l2: float, iterations: int, learning_rate: float
) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression, class-balanced (each class weighs the same in total), by full-batch
    Nesterov-accelerated gradient descent (momentum 0.9) from zeros: deterministic for the same inputs."""
    n, d = x.shape
    xt = np.ascontiguousarray(x.T)
    counts = np.bincount(y, minlength=n_classes).astype(np.float64)
    weights = ((n / (n_classes * np.maximum(counts, 1.0)))[y] / n)[:, None]
    onehot = np.eye(n_classes)[y]
    w, b = np.zeros((d, n_classes)), np.zeros(n_classes)
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    momentum = 0.9
    for _ in range(iterations):
        lw, lb = w + momentum * vw, b + momentum * vb
        g = (_softmax(_matmul(x, lw) + lb) - onehot) * weights
        vw = momentum * vw - learning_rate * (_matmul(xt, g) + l2 * lw)
        vb = momentum * vb - learning_rate * g.sum(axis=0)
        w, b = w + vw, b + vb
    return w, b


def choose_threshold(proba: np.ndarray, y: np.ndarray, target_accuracy: float) -> float:
    """The smallest confidence t (on a 0.01 grid) at which predictions with top probability >= t are at least
    `target_accuracy` accurate; 1.0 when none is."""
    top, pred = proba.max(axis=1), proba.argmax(axis=1)
    for t in np.round(np.arange(0.0, 1.0, 0.01), 2):
        sel = top >= t
        if sel.any() and (pred[sel] == y[sel]).mean() >= target_accuracy:
            return float(t)
    return 1.0


def fold_of(key: str, folds: int, seed: int) -> int:
    return int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest(), 16) % folds


def fold_key(row: dict) -> str:
    """A training document's URL, or its origin (`doc`: the same for every passage of one article)."""
    return row.get("url") or row["doc"]


@dataclass(frozen=True)
class DomainModel:
    """A trained classifier: standardisation, weights, the confidence threshold and how it was made."""

    classes: tuple[str, ...]
    use_url: bool
    mean: np.ndarray
    scale: np.ndarray
    w: np.ndarray
    b: np.ndarray
    threshold: float
    info: dict

    def proba(self, texts: Sequence[str], urls: Sequence[str | None]) -> np.ndarray:
        x = standardise(raw_features(texts, urls, self.use_url), self.mean, self.scale)
        return _softmax(_matmul(x, self.w) + self.b)

    def predict(self, texts: Sequence[str], urls: Sequence[str | None]) -> list[tuple[str, float]]:
        """(label, confidence) per document: the top class, or `unknown` under the threshold."""
        if not texts:
            return []
        p = self.proba(texts, urls)
        out = []
        for row in p:
            k = int(row.argmax())
            conf = round(float(row[k]), 6)
            out.append((self.classes[k] if conf >= self.threshold else UNKNOWN, conf))
        return out

    def to_json(self) -> str:
        """Canonical JSON (the model file; its sha256 is the model's version)."""

        def arr(a: np.ndarray) -> list:
            return np.round(a, 8).tolist()

        return json.dumps(
            {
                "format": MODEL_FORMAT,
                "embedding_model": EMBEDDING_MODEL,
                "max_chars": MAX_CHARS,
                "classes": list(self.classes),
                "use_url": self.use_url,
                "threshold": self.threshold,
                "info": self.info,
                "mean": arr(self.mean),
                "scale": arr(self.scale),
                "w": arr(self.w),
                "b": arr(self.b),
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> DomainModel:
        d = json.loads(text)
        if d.get("format") != MODEL_FORMAT or d.get("embedding_model") != EMBEDDING_MODEL:
            raise ValueError(
                f"domain model format {d.get('format')!r} / embeddings {d.get('embedding_model')!r} is not "
                f"{MODEL_FORMAT!r} / {EMBEDDING_MODEL!r}: re-materialise curated/domain_model"
            )
        return cls(
            tuple(d["classes"]),
            bool(d["use_url"]),
            np.asarray(d["mean"]),
            np.asarray(d["scale"]),
            np.asarray(d["w"]),
            np.asarray(d["b"]),
            float(d["threshold"]),
            d["info"],
        )

    @cached_property
    def digest(self) -> str:
        """sha256 of the model's JSON (once per model object: 40 ms, asked for by every curate run)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()


def _fit(x: np.ndarray, y: np.ndarray, p: DomainModelParams) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    mean = np.nanmean(x, axis=0)
    scale = np.nanstd(x, axis=0)
    scale[~(scale >= 1e-9)] = 1.0
    w, b = fit_softmax(standardise(x, mean, scale), y, len(CLASSES), p.l2, p.iterations, p.learning_rate)
    return mean, scale, w, b


def train(params: DomainModelParams, rows: list[dict] | None = None) -> DomainModel:
    """Fit on the training rows (file order), choose the threshold on out-of-fold predictions: those of every
    row, or with `use_url` only of rows not labelled by a URL rule (a model that reads URLs would pass those
    rules' own test)."""
    rows = read_jsonl(params.train_path) if rows is None else rows
    bad = sorted({r["label"] for r in rows} - set(CLASSES))
    if bad:
        raise ValueError(f"training labels {bad} are not classes {list(CLASSES)}: fix {params.train_path}")
    x = raw_features([r["text"] for r in rows], [r["url"] for r in rows], params.use_url)
    y = np.asarray([CLASSES.index(r["label"]) for r in rows])
    folds = np.asarray([fold_of(fold_key(r), params.folds, params.seed) for r in rows])
    oof = np.zeros((len(rows), len(CLASSES)))
    for k in range(params.folds):
        test = folds == k
        mean, scale, w, b = _fit(x[~test], y[~test], params)
        oof[test] = _softmax(_matmul(standardise(x[test], mean, scale), w) + b)
    judged = np.asarray([not (params.use_url and r.get("label_source") == "url_rule") for r in rows])
    threshold = choose_threshold(oof[judged], y[judged], params.target_accuracy)
    mean, scale, w, b = _fit(x, y, params)
    right = oof[judged].argmax(axis=1) == y[judged]
    confident = oof[judged].max(axis=1) >= threshold
    info = {
        "params": params.hashed(),
        "train_documents": len(rows),
        "train_per_class": {c: int((y == i).sum()) for i, c in enumerate(CLASSES)},
        "train_sha256": hashlib.sha256("".join(text_sha256(r["text"]) + r["label"] for r in rows).encode()).hexdigest(),
        "threshold_documents": int(judged.sum()),
        "oof_accuracy": round(float(right.mean()), 4),
        "oof_confident_accuracy": round(float(right[confident].mean()), 4) if confident.any() else 0.0,
        "oof_unknown_share": round(float(1 - confident.mean()), 4),
    }
    # through the file format: the weights curation uses are the rounded ones the asset writes
    return DomainModel.from_json(DomainModel(CLASSES, params.use_url, mean, scale, w, b, threshold, info).to_json())


@dataclass(frozen=True)
class DomainValidationParams:
    """Validation of the domain classifier on the held-out, hand-labelled set."""

    eval_path: str = knob(str(EVAL_PATH), "JSON lines of hand-labelled {url, text, label} held-out real pages")
    min_precision: float = knob(
        0.7, "a class under this held-out precision fails the blocking check (mixtures must not filter on it)"
    )

    def hashed(self) -> dict:
        return {**asdict(self), "eval_path": Path(self.eval_path).name}


# ---- evaluation ---------------------------------------------------------------------------------------------


def evaluate(gold: Sequence[str], predicted: Sequence[str]) -> list[dict]:
    """Per class (then `unknown`, then `all`): support, predicted, correct, precision, recall, f1 and how many of
    the class's documents fell under the threshold (`unknown`). Precision counts confident predictions only;
    recall counts every document of the class (an `unknown` is a miss)."""
    rows = []
    for c in CLASSES:
        support = sum(g == c for g in gold)
        pred = sum(p == c for p in predicted)
        tp = sum(g == c and p == c for g, p in zip(gold, predicted))
        prec = tp / pred if pred else 0.0
        rec = tp / support if support else 0.0
        rows.append(
            {
                "label": c,
                "support": support,
                "predicted": pred,
                "correct": tp,
                "precision": prec,
                "recall": rec,
                "f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0,
                "unknown": sum(g == c and p == UNKNOWN for g, p in zip(gold, predicted)),
            }
        )
    n_unknown = sum(p == UNKNOWN for p in predicted)
    rows.append(
        {
            "label": UNKNOWN,
            "support": 0,
            "predicted": n_unknown,
            "correct": 0,
            "precision": 0.0,
            "recall": 0.0,
            "f1": 0.0,
            "unknown": n_unknown,
        }
    )
    confident = [(g, p) for g, p in zip(gold, predicted) if p != UNKNOWN]
    acc = sum(g == p for g, p in confident) / len(confident) if confident else 0.0
    rows.append(
        {
            "label": "all",
            "support": len(gold),
            "predicted": len(confident),
            "correct": sum(g == p for g, p in confident),
            "precision": acc,
            "recall": sum(g == p for g, p in zip(gold, predicted)) / len(gold) if gold else 0.0,
            "f1": 0.0,
            "unknown": n_unknown,
        }
    )
    return rows


def validate(
    model: DomainModel, eval_rows: list[dict], with_url: bool = True
) -> tuple[list[dict], list[tuple[str, float]]]:
    """The per-class table on the held-out set and each document's (label, confidence), read with each page's
    URL or without it."""
    preds = model.predict([r["text"] for r in eval_rows], [r["url"] if with_url else None for r in eval_rows])
    return evaluate([r["label"] for r in eval_rows], [p for p, _ in preds]), preds


def weak_classes(rows: Iterable[dict], min_precision: float) -> dict[str, float]:
    """Classes (not `unknown`/`all`) whose held-out precision is under `min_precision`."""
    return {r["label"]: r["precision"] for r in rows if r["label"] in CLASSES and r["precision"] < min_precision}


def unvalidated_classes(params: DomainValidationParams | None = None) -> dict[str, float]:
    """The classes of the model curation uses (`load_model`) under the precision floor on the held-out real
    pages: what `curated/domain_validation`'s blocking check fails on, and what mixtures must not filter on."""
    params = params or DomainValidationParams()
    model = load_model()
    return dict(_weak(model.digest, params.eval_path, params.min_precision))


@lru_cache(maxsize=4)
def _weak(digest: str, eval_path: str, min_precision: float) -> tuple[tuple[str, float], ...]:
    rows, _ = validate(load_model(), read_jsonl(eval_path))
    return tuple(sorted(weak_classes(rows, min_precision).items()))


# ---- the model file and curation ----------------------------------------------------------------------------


def domain_model_path() -> Path:
    """Where the `curated/domain_model` asset writes the model (under TOKENLAKE_HOME)."""
    return tokenlake_home() / "models" / "domain" / "domain_model.json"


def write_model(model: DomainModel, path: Path) -> str:
    """Write the model file atomically; its sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(model.to_json(), encoding="utf-8")
    tmp.replace(path)
    return model.digest


@lru_cache(maxsize=2)
def _load(path: str, mtime_ns: int) -> DomainModel:
    return DomainModel.from_json(Path(path).read_text(encoding="utf-8"))


MODEL_CACHE_ENV = "TOKENLAKE_MODEL_CACHE"


def default_model_key(params: DomainModelParams) -> str:
    """What the default model is a function of: this module's code, the training file, the knobs, the embeddings."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(params.train_path).read_bytes())
    h.update(json.dumps([params.hashed(), EMBEDDING_MODEL, MODEL_FORMAT], sort_keys=True).encode())
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def _default_model() -> DomainModel:
    """The model trained from the repo's data with the default knobs (~20 s of embedding); with
    TOKENLAKE_MODEL_CACHE set, kept there by `default_model_key`, so other processes on the node load it."""
    params = DomainModelParams()
    cache = os.environ.get(MODEL_CACHE_ENV)
    path = Path(cache) / f"domain_model-{default_model_key(params)}.json" if cache else None
    if path is not None and path.is_file():
        return DomainModel.from_json(path.read_text(encoding="utf-8"))
    model = train(params)
    if path is not None:
        write_model(model, path)
    return model


def load_model(path: Path | None = None) -> DomainModel:
    """The materialised model (curated/domain_model) when its file exists; otherwise the model trained from the
    repo's data with the default knobs (the same bytes the asset writes with them)."""
    p = path or domain_model_path()
    if p.is_file():
        return _load(str(p), p.stat().st_mtime_ns)
    return _default_model()


def label_domains(rows: list[dict]) -> list[dict]:
    """Set `domain_class` and `domain_confidence` on curated rows that have text (one embedding batch for all);
    rows without text get nulls. Returns `rows`."""
    with_text = [r for r in rows if r.get("text")]
    preds = load_model().predict([r["text"] for r in with_text], [r.get("url") for r in with_text])
    for r in rows:
        r["domain_class"], r["domain_confidence"] = None, None
    for r, (label, conf) in zip(with_text, preds):
        r["domain_class"], r["domain_confidence"] = label, conf
    return rows
