"""Evaluation quarantine: throughput of n-gram + near matching against every shipped benchmark item, the
indexes' build time and memory, and what it flags in untouched real documents.

Items: `DEFAULT_SOURCES` (GSM8K test, HumanEval, MMLU-Redux: 7,183 items). Documents: the repo's real text
(Wikipedia excerpt cut into paragraph runs of <= 2,500 characters, ScrapingHub news; tests/quarantine/
injection.py) and, when ../shared/data is present, the 497 files of the Python 3.11 reST documentation
whole (technical prose and code, the text most like HumanEval).

Baseline, measured in the same run: the classic GPT-3-style implementation (as in NeMo Curator's Dask-era
TaskDecontamination): a Python dict from each item's 13-gram string to its items, and a document's 13-gram
strings looked up one by one. Both sides use the same `normalise_words`, so the ratio compares the lookup;
the normalisation's own cost is printed apart. Times are CPU seconds, best of --repeats (the machine is
shared: interference only ever adds).

    python bench/decontaminate.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tarfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/ itself is sys.path[0] when run as a script; a bench/<stdlib name>.py (bench/tokenize.py) would shadow
# the standard library there, so only the repo root goes on the path.
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

from assets.quarantine.benchmarks import DEFAULT_SOURCES, load_items  # noqa: E402
from assets.quarantine.near_match import NearMatchIndex, find_matches  # noqa: E402
from assets.quarantine.ngrams import DEFAULT_N, NgramIndex, normalise_words  # noqa: E402
from bench.common import PYDOCS_TAR  # noqa: E402
from tests.quarantine.injection import real_documents  # noqa: E402


def cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def best_cpu(fn, repeats: int):
    """(least CPU seconds over `repeats` calls, the last call's result)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        c0 = cpu()
        result = fn()
        best = min(best, cpu() - c0)
    return best, result


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def documents() -> tuple[list[tuple[str, str]], list[str]]:
    """(source name, text) of every document, and notes on where they came from."""
    docs = [("repo", t) for t in real_documents()]
    notes = [f"{len(docs)} repo documents (Wikipedia paragraph runs + ScrapingHub news, tests/quarantine/injection.py)"]
    if PYDOCS_TAR.is_file():
        n = 0
        with tarfile.open(PYDOCS_TAR) as tf:
            for member in tf:
                if member.isfile() and member.name.endswith((".rst", ".txt")):
                    docs.append(("pydocs", tf.extractfile(member).read().decode("utf-8", "replace")))
                    n += 1
        notes.append(f"{n} Python 3.11 reST files, whole ({PYDOCS_TAR.name})")
    else:
        notes.append(f"../shared is missing ({PYDOCS_TAR} not found): measuring on the repo's documents only")
    return docs, notes


# --- the baseline: a dict of n-gram strings -----------------------------------------------------------------


def baseline_build(items, n: int = DEFAULT_N) -> dict[str, list[int]]:
    table: dict[str, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        words = normalise_words(item.text).words
        for gram in {" ".join(words[j : j + n]) for j in range(len(words) - n + 1)}:
            table[gram].append(i)
    return dict(table)


def baseline_find(table: dict[str, list[int]], words: list[str], n: int = DEFAULT_N) -> set[int]:
    found: set[int] = set()
    for j in range(len(words) - n + 1):
        hit = table.get(" ".join(words[j : j + n]))
        if hit:
            found.update(hit)
    return found


def dict_bytes(table: dict[str, list[int]]) -> int:
    """Rough deep size: the dict, its key strings and value lists (ints are small cached objects or 28 B)."""
    return sys.getsizeof(table) + sum(sys.getsizeof(k) + sys.getsizeof(v) + 28 * len(v) for k, v in table.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    t0 = time.perf_counter()
    items = load_items(DEFAULT_SOURCES)
    per_benchmark = defaultdict(int)
    for item in items:
        per_benchmark[item.benchmark] += 1
    print(f"items: {len(items):,} ({dict(per_benchmark)}), loaded in {time.perf_counter() - t0:.2f} s")

    docs, notes = documents()
    texts = [t for _, t in docs]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print("documents: " + "; ".join(notes) + f" -> {len(texts):,} documents, {mb:.1f} MB\n")

    build_ngram_s, ngram_index = best_cpu(lambda: NgramIndex.build(items), args.repeats)
    build_near_s, near_index = best_cpu(lambda: NearMatchIndex.build(items), args.repeats)
    build_base_s, table = best_cpu(lambda: baseline_build(items), args.repeats)
    print("index                         build (CPU s)        bytes   entries")
    print(f"n-gram (13), numpy            {build_ngram_s:13.2f} {ngram_index.nbytes:12,} {len(ngram_index):9,}")
    print(
        f"near (bigram anchors+words)   {build_near_s:13.2f} {near_index.nbytes:12,} {len(near_index.anchors):9,}"
        f"   ({near_index.n_matchable:,} items near-matchable)"
    )
    print(f"baseline dict of strings      {build_base_s:13.2f} {dict_bytes(table):12,} {len(table):9,}")
    print(f"our n-gram index / baseline memory: {ngram_index.nbytes / dict_bytes(table):.3f}\n")

    norm_s, norms = best_cpu(lambda: [normalise_words(t) for t in texts], args.repeats)
    for norm in norms:
        _ = norm.hashes  # computed once here; the n-gram pass below times them on fresh copies
    # The n-gram pass gets fresh NormalisedTexts each repeat, so it pays for the word hashes.
    fresh = [[normalise_words(t) for t in texts] for _ in range(args.repeats)]

    def ours_ngram():
        return [ngram_index.find(n) for n in fresh.pop()]

    def ours_near():
        return [near_index.find(n) for n in norms]

    def ours_combined():
        return [find_matches(t, ngram_index, near_index) for t in texts]

    def baseline():
        return [baseline_find(table, n.words) for n in norms]

    ngram_s, ngram_found = best_cpu(ours_ngram, args.repeats)
    near_s, _ = best_cpu(ours_near, args.repeats)
    combined_s, combined = best_cpu(ours_combined, args.repeats)
    base_s, base_found = best_cpu(baseline, args.repeats)

    rows = [
        ("normalise_words (words + spans), both sides need it", norm_s),
        ("baseline: dict lookup of 13-gram strings (lookup only)", base_s),
        ("ours: 13-gram index (word hashes + lookup)", ngram_s),
        ("ours: near matching (anchors + alignment)", near_s),
        ("ours: find_matches = normalise + 13-grams + near", combined_s),
    ]
    print(f"matching {len(texts):,} documents ({mb:.1f} MB) against {len(items):,} items   CPU s   docs/s    MB/s")
    for label, seconds in rows:
        print(f"{label:<56} {seconds:7.2f} {len(texts) / seconds:8.0f} {mb / seconds:7.2f}")
    print(
        f"ratio, lookup: baseline CPU / ours (13-gram) = {base_s / ngram_s:.2f}x; "
        f"end to end (baseline + normalise) / find_matches = {(base_s + norm_s) / combined_s:.2f}x"
    )

    # Same answers as the baseline for ordinary n-grams (ours also finds short items whole).
    ours_long = [
        {
            m.item_index
            for m in ms
            if ngram_index.ngram_counts[m.item_index] > 1 or len(normalise_words(items[m.item_index].text)) >= DEFAULT_N
        }
        for ms in ngram_found
    ]
    agree = sum(a == b for a, b in zip(ours_long, base_found))
    print(f"13-gram matches agree with the baseline on {agree}/{len(texts)} documents")

    flagged = [(k, m) for k, ms in enumerate(combined) for m in ms]
    print(f"\nflagged in these untouched documents: {len({k for k, _ in flagged})} of {len(texts)}")
    for k, m in flagged[:30]:
        src, text = docs[k]
        print(
            f"  {src} doc {k} [{m.char_start}:{m.char_end}] {m.kind} {m.score:.3f} {items[m.item_index].item_id}: "
            f"{text[m.char_start : m.char_end]!r:.200}"
        )
    print(f"\npeak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
