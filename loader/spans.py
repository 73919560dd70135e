"""A batch's audit spans and sample indices, kept as the packing's numpy arrays and turned into Python lists
only when someone reads them.

Per sequence of a batch, `batch["documents"]` is the list of (doc_id, token_start, token_end) pieces its tokens
come from and `batch["sample_indices"]` the sample index of each piece. Building those lists for every batch
costs ~100-250 ns a piece on the read-ahead thread (a tuple and two ints each, and freeing them again), about
2 ns a token with short documents, more than a tenth of what the loader spends on a token; most training loops
never look at them. So each is a read-only sequence over arrays shared by the batches of one packed read: the
first access (indexing, iteration, ==, `to_list()`; not `len`) builds this batch's lists once, on the reader's
thread (both kinds: p50 31 us for a batch of 8 x 2048 tokens in ~150 pieces). They compare equal to the plain
lists and pickle as plain lists; for `json.dumps`, `list(batch["documents"])` (or `.to_list()`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class Pieces:
    """The pieces of one packed read (several consecutive batches): per piece its sample, token_start and
    token_end; `bounds[i]:bounds[i + 1]` are the pieces of the read's sequence i; `doc_ids` per sample."""

    doc_ids: np.ndarray
    samples: np.ndarray
    start: np.ndarray
    end: np.ndarray
    bounds: np.ndarray


class _PerSequence(Sequence):
    """Sequences [lo, hi) of a `Pieces`: one list per sequence, built on first access and then kept."""

    __slots__ = ("_pieces", "_lo", "_hi", "_lists")

    def __init__(self, pieces: Pieces, lo: int, hi: int) -> None:
        self._pieces, self._lo, self._hi = pieces, int(lo), int(hi)
        self._lists: list | None = None

    @abstractmethod
    def _items(self, a: int, b: int) -> list:
        """The entries of pieces [a, b), one per piece, in order."""

    def to_list(self) -> list[list]:
        """The plain lists (built once)."""
        lists = self._lists
        if lists is None:
            bounds = self._pieces.bounds[self._lo : self._hi + 1].tolist()  # hi - lo + 1 entries
            lo = bounds[0]
            items = self._items(lo, bounds[-1])
            lists = self._lists = [items[a - lo : b - lo] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        return lists

    def __len__(self) -> int:
        return self._hi - self._lo

    def __getitem__(self, i: Any) -> Any:
        return self.to_list()[i]

    def __iter__(self) -> Iterator[list]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _PerSequence):
            return type(self) is type(other) and self.to_list() == other.to_list()
        if isinstance(other, list | tuple):
            return self.to_list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] - a sequence compared by value, like a list

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_list()!r})"

    def __reduce__(self) -> tuple:
        return list, (self.to_list(),)  # another process gets plain lists


class AuditSpans(_PerSequence):
    """Per sequence, the list of (doc_id, token_start, token_end) pieces of its tokens (`batch["documents"]`)."""

    __slots__ = ()

    def _items(self, a: int, b: int) -> list:
        p = self._pieces
        ids = p.doc_ids[p.samples[a:b]].tolist()
        return list(zip(ids, p.start[a:b].tolist(), p.end[a:b].tolist(), strict=True))


class SampleIndices(_PerSequence):
    """Per sequence, the sample index of each of its pieces (`batch["sample_indices"]`: tells repetitions of a
    document apart)."""

    __slots__ = ()

    def _items(self, a: int, b: int) -> list:
        return self._pieces.samples[a:b].tolist()
