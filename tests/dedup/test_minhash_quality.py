"""Quality of MinHash-LSH (14 bands x 8 rows) on a labelled set of real text with exact-Jaccard labels.

The set (tests/dedup/labelled.py): all 993 base documents kept in the repo (Wikipedia chunks and news
articles) and 60 families of 15 edited variants, 1,893 documents and 1.8 million pairs, every pair labelled by
the exact Jaccard similarity of its 5-word shingle sets. bench/dedup_quality.py prints the same report for
more families and several MinHash seeds. Run with -s to see the report. The module takes ~8 s.

What the numbers say (seed 1; seeds 2-6 behave alike):
- LSH finds ~98% of the pairs with exact Jaccard >= 0.8 (theory: >= 92.4% for each such pair).
- Verifying candidates by estimated Jaccard >= 0.8 gives precision ~0.83 and recall ~0.87, the same as an ideal
  MinHash would on these pairs: the set holds ~900 pairs in [0.7, 0.8) next to ~770 at >= 0.8, and a 112-row
  estimate has a standard deviation of 0.038 at s = 0.8, so pairs within a few hundredths of the threshold
  land on either side by chance. The targets (precision >= 0.95, recall >= 0.9) hold outside that grey zone
  (mistakes counted only below 0.75 or at/above 0.85), and hold strictly when candidates are verified with the
  exact Jaccard similarity of their shingles (precision 1.0, recall = LSH recall); see the bench.
"""

from __future__ import annotations

import math

import pytest

from assets.dedup.minhash import MinHashParams
from tests.dedup.labelled import build_labelled_set, evaluate, format_report

PARAMS = MinHashParams()


@pytest.fixture(scope="module")
def quality():
    data = build_labelled_set(n_base=None, n_families=60, seed=0)
    q = evaluate(data, PARAMS, dup_threshold=0.8, verify_thresholds=(0.8, 0.75), grey=0.05)
    print("\n" + format_report(q))
    return q


def test_the_labelled_set_covers_the_threshold_region(quality):
    # Without many pairs on both sides of 0.8 the other checks would prove little.
    assert quality.n_true >= 500
    for row in quality.buckets[5:10]:  # [0.5, 0.6) ... [0.9, 1.0]
        assert row.n_pairs >= 150, format_report(quality)
    assert quality.buckets[0].n_pairs > 0.99 * quality.n_pairs  # most pairs are unrelated documents


def test_lsh_candidates_follow_the_s_curve(quality):
    # Per similarity bucket, the fraction of pairs sharing a band vs the mean of 1-(1-s^8)^14 over the bucket's
    # own pairs (the curve is too steep for its midpoint value: 0.56 -> 0.92 across [0.7, 0.8)).
    # Tolerance: 4 binomial standard deviations, plus 0.01 because pairs of one family share shingles (and all
    # pairs share the permutations), so outcomes are not independent. Seeds 1-6 use at most 62% of it.
    for row in quality.buckets:
        if row.n_pairs < 100:
            continue
        tol = 4 * math.sqrt(row.variance) / row.n_pairs + 0.01
        assert abs(row.measured - row.expected) <= tol, (row, format_report(quality))


def test_lsh_finds_the_true_duplicates(quality):
    # Every pair at s >= 0.8 shares a band with probability >= 0.924; the set's mix of s gives ~0.98.
    assert quality.lsh_recall >= 0.95, format_report(quality)


@pytest.mark.parametrize("verify", [0.8, 0.75])
def test_verification_scores_like_an_ideal_minhash(quality, verify):
    # Strict precision/recall against what an ideal 112-row MinHash (independent rows) would score on exactly
    # these pairs. 0.05: across seeds 1-6 the measured values stay within 0.03 of the ideal ones.
    m = quality.by_verify[verify]
    assert abs(m["precision"] - m["ideal_precision"]) <= 0.05, format_report(quality)
    assert abs(m["recall"] - m["ideal_recall"]) <= 0.05, format_report(quality)


def test_targets_hold_outside_the_grey_zone(quality):
    # Precision >= 0.95 and recall >= 0.9 at threshold 0.8, counting a false positive only below 0.75 and a
    # miss only at or above 0.85 (+-0.05, about 1.3 standard deviations of the estimate at s = 0.8).
    m = quality.by_verify[0.8]
    assert m["precision_outside_grey"] >= 0.95, format_report(quality)
    assert m["recall_outside_grey"] >= 0.9, format_report(quality)
    # Predicted duplicates far from the threshold are rare: a pair at s = 0.7 estimates >= 0.8 with probability
    # ~1% (seeds 1-6: 0 to 5 of ~820 predicted pairs lie below 0.7).
    assert m["fp"] - m["fp_near_miss"] <= 0.01 * (m["tp"] + m["fp"]), format_report(quality)


def test_exact_verification_meets_the_targets(quality):
    """The asset's default path (verify="exact"): LSH candidates kept when their shingle sets' exact Jaccard
    reaches 0.8. The issue's targets hold strictly here: precision >= 0.95, recall >= 0.9."""
    m = quality.exact_verify
    assert m["precision"] >= 0.95
    assert m["recall"] >= 0.9
