"""The near-dedup shuffle's lookups (`shuffle.Matcher`, `near_pairs.Requested`): exact whatever the hashes do,
and the same answer as Arrow's own set lookup."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from assets.dedup import shuffle
from assets.dedup.near_pairs import Requested
from assets.dedup.shuffle import Matcher


def strings(rng: np.random.Generator, n: int, alphabet: int = 40) -> pa.Array:
    return pa.array([f"{v:x}" for v in rng.integers(0, alphabet, n)], pa.string())


def test_matcher_finds_what_is_in_finds():
    rng = np.random.default_rng(0)
    values = pc.unique(strings(rng, 30))
    query = pa.concat_arrays([strings(rng, 500), pa.array([None, ""], pa.string())])
    rows, positions = Matcher(values).find(query)
    expected = np.flatnonzero(pc.is_in(query, value_set=values).to_numpy(zero_copy_only=False))
    assert rows.tolist() == expected.tolist()
    m = Matcher(values)
    assert pc.equal(m.values.take(pa.array(positions)), query.take(pa.array(rows))).to_pylist() == [True] * len(rows)


def test_matcher_confirms_every_hash_hit(monkeypatch):
    """Strings whose hashes collide (here: all of them) are told apart by comparing the strings."""
    monkeypatch.setattr(shuffle, "string_hashes", lambda k: np.zeros(len(k), np.uint64))
    m = Matcher(pa.array(["a", "b", "c"]))
    rows, positions = m.find(pa.array(["c", "x", "a", "c"]))
    assert rows.tolist() == [0, 2, 3]
    assert m.values.take(pa.array(positions)).to_pylist() == ["c", "a", "c"]


@pytest.mark.parametrize("n", [0, 1, 7])
def test_ranges_expands_each_start_by_its_count(n):
    rng = np.random.default_rng(n)
    starts, counts = rng.integers(0, 100, n), rng.integers(0, 4, n)
    which, at = shuffle.ranges(starts, counts)
    assert which.tolist() == [k for k in range(n) for _ in range(counts[k])]
    assert at.tolist() == [int(starts[k]) + j for k in range(n) for j in range(counts[k])]


def test_requested_sends_a_document_to_every_partition_that_asked():
    asked = Requested.of(pa.array(["d1", "d2", "d1", "d3", "d1"]), np.array([4, 0, 2, 4, 1]))
    rows, positions = asked.ids.find(pa.array(["d3", "zz", "d1"]))
    which, parts = asked.parts_of(positions)
    got = sorted(zip(rows[which].tolist(), parts.tolist()))
    assert got == [(0, 4), (2, 1), (2, 2), (2, 4)]
