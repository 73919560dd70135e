"""Near matches: evaluation items copied with light edits, found by aligned bigram anchors and verified by
word alignment (README.md). No Dagster here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from difflib import SequenceMatcher

import numpy as np

from assets.quarantine.ngrams import (
    Match,
    NgramIndex,
    NormalisedText,
    ngram_hashes,
    normalise_words,
    sorted_lookup,
)

DEFAULT_THRESHOLD = 0.8
DEFAULT_MIN_WORDS = 8  # with 2 of 7 words changed, what is left is a common phrase; 7-word items match exactly only
DEFAULT_ANCHOR_N = 2
DEFAULT_MAX_ANCHOR_ITEMS = 50
DEFAULT_VOTE_FRACTION = 0.2
DEFAULT_MIN_VOTES = 2
DEFAULT_SLACK = 2
_OFFSET_BIAS = 1 << 31  # item starts can be negative (an anchor near the document's start); keys stay >= 0


class NearMatchIndex:
    """Word bigram anchors of evaluation items plus each item's word hashes, for aligned near matching."""

    def __init__(
        self,
        *,
        anchors: np.ndarray,
        anchor_items: np.ndarray,
        anchor_positions: np.ndarray,
        item_words: np.ndarray,
        item_offsets: np.ndarray,
        votes_needed: np.ndarray,
        anchor_n: int,
        threshold: float,
        slack: int,
    ):
        self.anchors = anchors  # uint64, sorted
        self.anchor_items = anchor_items  # int32, parallel to anchors
        self.anchor_positions = anchor_positions  # int32, word position of the anchor in its item
        self.item_words = item_words  # uint64, every item's word hashes, concatenated
        self.item_offsets = item_offsets  # int64, item i's words are item_words[offsets[i]:offsets[i+1]]
        self.votes_needed = votes_needed  # int32 per item; 0 = the item is not near-matched (too short/common)
        self.anchor_n = anchor_n
        self.threshold = threshold
        self.slack = slack

    @classmethod
    def build(
        cls,
        items: Iterable[str | object],
        *,
        threshold: float = DEFAULT_THRESHOLD,
        min_words: int = DEFAULT_MIN_WORDS,
        anchor_n: int = DEFAULT_ANCHOR_N,
        max_anchor_items: int = DEFAULT_MAX_ANCHOR_ITEMS,
        vote_fraction: float = DEFAULT_VOTE_FRACTION,
        min_votes: int = DEFAULT_MIN_VOTES,
        slack: int = DEFAULT_SLACK,
    ) -> NearMatchIndex:
        """Index items (`EvalItem`s or texts; item_index = position in `items`) of at least `min_words` words."""
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"near-match threshold must be in (0, 1], got {threshold}")
        words, anchors, owners, positions = [], [], [], []
        for i, item in enumerate(items):
            h = normalise_words(item if isinstance(item, str) else item.text).hashes
            words.append(h)
            a = ngram_hashes(h, anchor_n) if len(h) >= min_words else np.empty(0, dtype=np.uint64)
            anchors.append(a)
            owners.append(np.full(len(a), i, dtype=np.int32))
            positions.append(np.arange(len(a), dtype=np.int32))
        n_items = len(words)
        anchor_arr = np.concatenate(anchors) if anchors else np.empty(0, dtype=np.uint64)
        owner_arr = np.concatenate(owners) if owners else np.empty(0, dtype=np.int32)
        pos_arr = np.concatenate(positions) if positions else np.empty(0, dtype=np.int32)

        # Drop anchors shared by many items: count distinct items per anchor hash.
        pairs = np.unique(np.stack([anchor_arr, owner_arr.astype(np.uint64)]), axis=1)
        uniq, items_per = np.unique(pairs[0], return_counts=True)
        common = uniq[items_per > max_anchor_items]
        keep = ~np.isin(anchor_arr, common)
        anchor_arr, owner_arr, pos_arr = anchor_arr[keep], owner_arr[keep], pos_arr[keep]
        order = np.lexsort((pos_arr, owner_arr, anchor_arr))

        kept_per_item = np.bincount(owner_arr, minlength=n_items)
        votes_needed = np.maximum(min_votes, np.ceil(vote_fraction * kept_per_item)).astype(np.int32)
        votes_needed[kept_per_item < min_votes] = 0

        lengths = np.array([len(w) for w in words], dtype=np.int64)
        return cls(
            anchors=anchor_arr[order],
            anchor_items=owner_arr[order],
            anchor_positions=pos_arr[order],
            item_words=np.concatenate(words) if words else np.empty(0, dtype=np.uint64),
            item_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            votes_needed=votes_needed,
            anchor_n=anchor_n,
            threshold=threshold,
            slack=slack,
        )

    @property
    def n_matchable(self) -> int:
        """Items that near matching can find (long enough, with enough distinctive anchors)."""
        return int(np.count_nonzero(self.votes_needed))

    @property
    def nbytes(self) -> int:
        """Memory held by the index arrays, in bytes."""
        arrays = (
            self.anchors,
            self.anchor_items,
            self.anchor_positions,
            self.item_words,
            self.item_offsets,
            self.votes_needed,
        )
        return sum(a.nbytes for a in arrays)

    def candidates(self, norm: NormalisedText, skip_items: Collection[int] = ()) -> list[tuple[int, int, int]]:
        """(item_index, start word in the document, votes) of the best-supported start of each candidate item."""
        doc = ngram_hashes(norm.hashes, self.anchor_n)
        if len(doc) == 0 or len(self.anchors) == 0:
            return []
        left, right = sorted_lookup(self.anchors, doc)
        sizes = right - left
        if not sizes.any():
            return []
        entry = np.repeat(left - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())
        doc_pos = np.repeat(np.arange(len(doc), dtype=np.int64), sizes)
        items = self.anchor_items[entry].astype(np.int64)
        starts = doc_pos - self.anchor_positions[entry]
        keys = np.sort((items << 32) | (starts + _OFFSET_BIAS))
        uniq = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
        votes = np.searchsorted(keys, uniq + self.slack, side="right") - np.searchsorted(
            keys, uniq - self.slack, side="left"
        )
        u_items = (uniq >> 32).astype(np.int64)
        ok = votes >= self.votes_needed[u_items]
        if skip_items:
            ok &= ~np.isin(u_items, np.fromiter(skip_items, dtype=np.int64))
        if not ok.any():
            return []
        uniq, votes, u_items = uniq[ok], votes[ok], u_items[ok]
        # Best start per item: most votes, then earliest (uniq is sorted by item, then start).
        order = np.lexsort((uniq, -votes, u_items))
        first = np.concatenate([[True], np.diff(u_items[order]) != 0])
        best = order[first]
        return [(int(u_items[b]), int((uniq[b] & 0xFFFFFFFF) - _OFFSET_BIAS), int(votes[b])) for b in best]

    def similarity(self, item_index: int, norm: NormalisedText, start: int) -> tuple[float, int, int]:
        """(share of the item's words found in order near document word `start`, first and last matched
        document word); (0.0, -1, -1) when nothing matches."""
        item = self.item_words[self.item_offsets[item_index] : self.item_offsets[item_index + 1]]
        lo = max(0, start - self.slack)
        hi = min(len(norm), start + len(item) + self.slack)
        window = norm.hashes[lo:hi]
        blocks = [
            b
            for b in SequenceMatcher(None, item.tolist(), window.tolist(), autojunk=False).get_matching_blocks()
            if b.size
        ]
        if not blocks or len(item) == 0:
            return 0.0, -1, -1
        matched = sum(b.size for b in blocks)
        return matched / len(item), lo + blocks[0].b, lo + blocks[-1].b + blocks[-1].size - 1

    def find(self, text: str | NormalisedText, skip_items: Collection[int] = ()) -> list[Match]:
        """Items found near-verbatim in the document (similarity >= threshold), one Match per item, by item
        index; items in `skip_items` (e.g. already found by n-grams) are not checked."""
        norm = text if isinstance(text, NormalisedText) else normalise_words(text)
        matches = []
        for item, start, _votes in self.candidates(norm, skip_items):
            sim, first, last = self.similarity(item, norm, start)
            if sim >= self.threshold:
                matches.append(Match(item, "near", sim, int(norm.starts[first]), int(norm.ends[last])))
        return matches


def find_matches(text: str, ngram_index: NgramIndex, near_index: NearMatchIndex | None = None) -> list[Match]:
    """All evaluation items found in a document: n-gram matches, then near matches for the items the
    n-grams missed; sorted by (item_index, kind). The document is normalised once."""
    norm = normalise_words(text)
    matches = ngram_index.find(norm)
    if near_index is not None:
        matches += near_index.find(norm, skip_items={m.item_index for m in matches})
    return sorted(matches, key=lambda m: (m.item_index, m.kind))
