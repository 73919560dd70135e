"""Mixture selection: which tokenized documents a run view holds, how often, and in which canonical order.

Pure functions over plain values; the budget and fill rules are in README.md ("Mixture").
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from assets.knobs import knob

# Columns of tokenized.documents a component may filter on (the mixture labels and the partition columns).
FILTER_COLUMNS = ("language", "ppl_bucket", "host", "domain_class", "crawl", "segment")
# A floor on the domain classifier's confidence (documents' `domain_confidence`, assets/curated/domain.py): one
# number in [0, 1], e.g. {"domain_class": ["code"], "min_domain_confidence": ["0.6"]}; a document without a
# confidence does not match.
MIN_DOMAIN_CONFIDENCE = "min_domain_confidence"


class MixtureError(ValueError):
    """A mixture that cannot be realised (unknown column, empty pool, budget beyond the pools)."""


@dataclass(frozen=True)
class Component:
    """One mixture component: `filters` maps a label column to its allowed values (all must match)."""

    name: str = field(metadata={"doc": "The component's name (unique within the mixture)."})
    weight: float = field(metadata={"doc": "Its share of the view's tokens, relative to the other weights."})
    filters: Mapping[str, Sequence[str]] = field(
        default_factory=dict,
        metadata={
            "doc": f"Label column -> allowed values; every filter must match. Columns: {', '.join(FILTER_COLUMNS)}; "
            f"and {MIN_DOMAIN_CONFIDENCE}: [a number], the least domain_confidence."
        },
    )
    max_repetitions: int = knob(1, "Passes over the component's pool at most (2 = each document up to twice).")

    def __post_init__(self) -> None:
        if not self.name:
            raise MixtureError("a component needs a name")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise MixtureError(f"component {self.name!r}: weight must be > 0, got {self.weight!r}")
        if self.max_repetitions < 1:
            raise MixtureError(f"component {self.name!r}: max_repetitions must be >= 1, got {self.max_repetitions!r}")
        bad = sorted(set(self.filters) - set(FILTER_COLUMNS) - {MIN_DOMAIN_CONFIDENCE})
        if bad:
            raise MixtureError(
                f"component {self.name!r}: cannot filter on {bad}; allowed: {[*FILTER_COLUMNS, MIN_DOMAIN_CONFIDENCE]}"
            )
        self.min_domain_confidence  # noqa: B018 - validates the floor now, not at the first match

    @property
    def min_domain_confidence(self) -> float | None:
        """The `min_domain_confidence` filter as a number (None without one)."""
        if MIN_DOMAIN_CONFIDENCE not in self.filters:
            return None
        raw = self.filters[MIN_DOMAIN_CONFIDENCE]
        values = [raw] if isinstance(raw, (str, int, float)) else list(raw)
        try:
            (floor,) = (float(v) for v in values)
        except (TypeError, ValueError):
            floor = math.nan
        if not 0.0 <= floor <= 1.0:
            raise MixtureError(
                f"component {self.name!r}: {MIN_DOMAIN_CONFIDENCE} must be one number in [0, 1], got {raw!r}"
            )
        return floor

    def matches(self, doc: Mapping[str, object]) -> bool:
        floor = self.min_domain_confidence
        if floor is not None and not (doc.get("domain_confidence") is not None and doc["domain_confidence"] >= floor):
            return False
        return all(doc.get(col) in set(values) for col, values in self.filters.items() if col != MIN_DOMAIN_CONFIDENCE)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "weight": self.weight,
            "max_repetitions": self.max_repetitions,
            "filters": {
                k: [str(self.min_domain_confidence)] if k == MIN_DOMAIN_CONFIDENCE else sorted(v)
                for k, v in sorted(self.filters.items())
            },
        }


@dataclass(frozen=True)
class Sample:
    doc_id: str
    component: str
    repetition: int
    n_tokens: int


@dataclass(frozen=True)
class Realised:
    """Requested against realised shares of one component (both token and document shares)."""

    component: str
    requested_share: float
    token_share: float
    document_share: float
    documents: int
    tokens: int
    pool_documents: int
    pool_tokens: int
    repetitions: int  # passes started over the pool (a partial last pass counts)

    def as_dict(self) -> dict:
        return {k: (round(v, 9) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def refuse_unvalidated_domains(components: Sequence[Component], weak: Mapping[str, float], floor: float) -> None:
    """A component may not select on a domain class the classifier labels with precision under `floor` on
    held-out real pages (`weak`: class -> precision): such a label would mix in mostly other content."""
    bad = [
        f"component {c.name!r} filters on domain_class {cls!r} (precision {weak[cls]:.3f} < {floor} on held-out real "
        "pages, curated/domain_validation)"
        for c in components
        for cls in sorted(set(c.filters.get("domain_class", ())) & set(weak))
    ]
    if bad:
        raise MixtureError("; ".join(bad) + ": choose a validated class or no domain filter")


def seeded_key(seed: int, doc_id: str, repetition: int = 0) -> bytes:
    """The sort key of a document in seeded order: the same on every machine, independent of input order."""
    return hashlib.sha256(f"{seed}:{repetition}:{doc_id}".encode()).digest()


def check_components(components: Sequence[Component]) -> None:
    """A mixture has at least one component, each named once."""
    if not components:
        raise MixtureError("a run view needs at least one mixture component")
    names = [c.name for c in components]
    if len(set(names)) != len(names):
        raise MixtureError(f"component names must be unique, got {names}")


def assign_components(docs: Sequence[Mapping[str, object]], components: Sequence[Component]) -> dict[str, list]:
    """Pools: each document goes to the first component it matches; unmatched documents are left out."""
    check_components(components)
    pools: dict[str, list] = {c.name: [] for c in components}
    for doc in docs:
        for c in components:
            if c.matches(doc):
                pools[c.name].append(doc)
                break
    return pools


def feasible_budget(pool_tokens: Mapping[str, int], components: Sequence[Component]) -> int:
    """The largest token total every component can serve at its weight within its repetitions."""
    total_weight = sum(c.weight for c in components)
    return int(min(pool_tokens[c.name] * c.max_repetitions * total_weight / c.weight for c in components))


@dataclass(frozen=True)
class Fill:
    """How one component is filled: `full` passes over its pool, then (when `partial`) a first-fit pass of
    repetition `full` in seeded order over the pool while its `remaining` tokens allow. Decided from the pools'
    totals alone, so a sharded build decides it before any task sees a sample."""

    component: Component
    requested_share: float
    pool_documents: int
    pool_tokens: int
    full: int
    remaining: float  # tokens left for the partial pass, plus half a token of slack

    @property
    def partial(self) -> bool:
        return self.full < self.component.max_repetitions and self.remaining > 0


def plan_fills(
    components: Sequence[Component],
    pool_documents: Mapping[str, int],
    pool_tokens: Mapping[str, int],
    token_budget: int | None = None,
) -> list[Fill]:
    """Each component's fill from its pool's documents and tokens (MixtureError when the mixture cannot be
    realised: an empty pool, a budget beyond what the pools serve)."""
    check_components(components)
    for c in components:
        if not pool_documents[c.name]:
            raise MixtureError(f"component {c.name!r} matches no eligible document (filters {c.as_dict()['filters']})")
    limit = feasible_budget(pool_tokens, components)
    if token_budget is not None:
        if token_budget <= 0:
            raise MixtureError(
                f"token_budget must be > 0 or null for 'as much as the mixture allows', got {token_budget}"
            )
        if token_budget > limit:
            raise MixtureError(
                f"token_budget {token_budget:,} exceeds what the pools can serve at these weights and "
                f"max_repetitions: at most {limit:,} tokens"
            )
    budget = token_budget if token_budget is not None else limit
    total_weight = sum(c.weight for c in components)
    fills = []
    for c in components:
        target = budget * c.weight / total_weight
        tokens = pool_tokens[c.name]
        # half a token of slack: the budget is an integer, so the binding component's target can fall a
        # fraction of a token short of its full passes
        full = min(int((target + 0.5) // tokens), c.max_repetitions)
        fills.append(
            Fill(c, c.weight / total_weight, pool_documents[c.name], tokens, full, target - full * tokens + 0.5)
        )
    return fills


def first_fit(n_tokens: np.ndarray, remaining: float) -> tuple[np.ndarray, float]:
    """Which documents (token counts in seeded order) the partial pass takes: each one that still fits, in order;
    and the tokens left. Exact in float: every difference of `remaining` and integers stays representable."""
    n = np.asarray(n_tokens, np.int64)
    taken = np.zeros(len(n), bool)
    fits = np.cumsum(n) <= remaining  # the leading run that fits, at once
    k = len(n) if fits.all() else int(np.argmin(fits))
    taken[:k] = True
    remaining -= int(n[:k].sum())
    for j in (np.flatnonzero(n[k:] <= remaining) + k).tolist():  # R only falls: larger ones never fit again
        if n[j] <= remaining:
            taken[j] = True
            remaining -= int(n[j])
    return taken, remaining


def realise(fills: Sequence[Fill], documents: Sequence[int], tokens: Sequence[int], passes: Sequence[int]) -> list:
    """The realised mixture: per component its samples, their tokens and the passes started over its pool."""
    total_tokens = sum(tokens) or 1
    total_docs = sum(documents) or 1
    return [
        Realised(
            component=f.component.name,
            requested_share=f.requested_share,
            token_share=t / total_tokens,
            document_share=d / total_docs,
            documents=d,
            tokens=t,
            pool_documents=f.pool_documents,
            pool_tokens=f.pool_tokens,
            repetitions=p,
        )
        for f, d, t, p in zip(fills, documents, tokens, passes, strict=True)
    ]


def select(
    docs: Sequence[Mapping[str, object]], components: Sequence[Component], seed: int, token_budget: int | None = None
) -> tuple[list[Sample], list[Realised]]:
    """The samples of a run view (in canonical order) and the realised mixture per component, in one process
    (`assets.run_view.selection` computes the same samples as tasks).

    `docs` need `doc_id`, `n_tokens` and the filter columns."""
    check_components(components)
    pools = assign_components(docs, components)
    pool_tokens = {name: sum(int(d["n_tokens"]) for d in pool) for name, pool in pools.items()}
    fills = plan_fills(components, {name: len(pool) for name, pool in pools.items()}, pool_tokens, token_budget)
    chosen = [_fill(pools[f.component.name], f, seed) for f in fills]
    realised = realise(
        fills,
        [len(c) for c in chosen],
        [sum(s.n_tokens for s in c) for c in chosen],
        [1 + max((s.repetition for s in c), default=-1) for c in chosen],
    )
    samples = [s for c in chosen for s in c]
    samples.sort(key=lambda s: seeded_key(seed, s.doc_id, s.repetition))
    return samples, realised


def _fill(pool: Sequence[Mapping[str, object]], f: Fill, seed: int) -> list[Sample]:
    """Full passes over the pool, then a first-fit partial pass in seeded order."""
    name = f.component.name
    chosen = [Sample(str(d["doc_id"]), name, rep, int(d["n_tokens"])) for rep in range(f.full) for d in pool]
    if f.partial:
        order = sorted(pool, key=lambda d: seeded_key(seed, str(d["doc_id"]), f.full))
        taken, _ = first_fit(np.array([int(d["n_tokens"]) for d in order], np.int64), f.remaining)
        chosen += [Sample(str(d["doc_id"]), name, f.full, int(d["n_tokens"])) for d, t in zip(order, taken) if t]
    return chosen


def within_tolerance(realised: Sequence[Realised], tolerance: float) -> list[str]:
    """Components whose realised token share is further than `tolerance` (a fraction) from the request."""
    return [
        f"{r.component}: requested {r.requested_share:.2%}, realised {r.token_share:.2%}"
        for r in realised
        if abs(r.token_share - r.requested_share) > tolerance + 1e-12
    ]
