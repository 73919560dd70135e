"""The pipeline's step order, declared once: the demo runs it, the README shows it, a test keeps both equal.

Each step is a Dagster job defined next to its assets in `assets/<state>/defs.py`; `per` says what one run
of the job covers (a partition of which dimension, or everything at once).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    job: str
    state: str
    per: str  # "segment" | "tokenizer" | "benchmark" | "tokenizer x segment" | "benchmark x segment" | "all"
    what: str
    reviewer: bool = False  # a human decision: the demo prints how to take it instead of running it


STEPS: tuple[Step, ...] = (
    Step("raw_ingest", "raw", "segment", "WARC files -> raw.warc_records, raw.rejected_records"),
    Step("curate_models", "curated", "all", "reference KenLM model; language-ID validation"),
    Step("curate", "curated", "segment", "extraction, PII, language, quality, perplexity -> curated.documents"),
    Step("minhash", "dedup", "segment", "MinHash signatures and LSH bands -> dedup.minhash_*"),
    Step("exact_dedup", "curated", "all", "exact duplicates over every segment -> curated.exact_duplicates"),
    Step("near_dedup", "dedup", "all", "near-duplicate clusters over every segment -> dedup.near_duplicates"),
    Step("register_tokenizer", "tokenized", "tokenizer", "tokenizer.json as data -> tokenized.tokenizers"),
    Step("tokenize", "tokenized", "tokenizer x segment", "kept documents -> tokenized.documents"),
    Step("register_benchmark", "quarantine", "benchmark", "benchmark items -> quarantine.eval_items"),
    Step("decontaminate", "quarantine", "benchmark x segment", "matches -> quarantine.matches, .screenings"),
    Step("run_view_candidate", "run_view", "all", "mixture, manifest, blocking checks -> run_view.*"),
    Step("publish_run_view", "run_view", "all", "the approval gate: a reviewer publishes or rejects", True),
)


def steps_markdown() -> str:
    """The step table the README shows."""
    lines = ["| # | job | state | one run covers | what |", "|---|---|---|---|---|"]
    lines += [f"| {i} | `{s.job}` | {s.state} | {s.per} | {s.what} |" for i, s in enumerate(STEPS, 1)]
    return "\n".join(lines)
