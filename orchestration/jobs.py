"""Asset jobs, one per step of the flow, so sensors, the demo and the Launchpad can target them."""

import dagster as dg

from assets.curated.defs import DOCUMENTS, EXACT_DUPLICATES, LANGID_VALIDATION, REFERENCE_LM
from assets.dedup.defs import MINHASH_BANDS, MINHASH_SIGNATURES, NEAR_DUPLICATES
from assets.quarantine.defs import EVAL_ITEMS, MATCHES
from assets.run_view.defs import CANDIDATE
from assets.tokenized.defs import TOKENIZED_DOCUMENTS, TOKENIZERS

raw_ingest_job = dg.define_asset_job(
    "raw_ingest",
    selection=dg.AssetSelection.groups("raw"),
    description="Ingest one crawl segment's WARC files into raw.warc_records / raw.rejected_records.",
)

curate_models_job = dg.define_asset_job(
    "curate_models",
    selection=dg.AssetSelection.assets(REFERENCE_LM, LANGID_VALIDATION),
    description="Build the reference KenLM model and validate language ID (needed once before curation).",
)

curate_job = dg.define_asset_job(
    "curate",
    selection=dg.AssetSelection.assets(DOCUMENTS),
    description="Curate one crawl segment: extraction, language, quality, PII, perplexity decisions.",
)

exact_dedup_job = dg.define_asset_job(
    "exact_dedup",
    selection=dg.AssetSelection.assets(EXACT_DUPLICATES),
    description="Exact duplicates across every materialised partition of curated.documents.",
)

minhash_job = dg.define_asset_job(
    "minhash",
    selection=dg.AssetSelection.assets(MINHASH_BANDS, MINHASH_SIGNATURES),
    description="MinHash signatures and LSH bands of one crawl segment's kept documents.",
)

near_dedup_job = dg.define_asset_job(
    "near_dedup",
    selection=dg.AssetSelection.assets(NEAR_DUPLICATES),
    description="Near-duplicate clusters across every materialised partition (band by band from Iceberg).",
)

register_tokenizer_job = dg.define_asset_job(
    "register_tokenizer",
    selection=dg.AssetSelection.assets(TOKENIZERS),
    description="Store a named tokenizer.json (a `tokenizers` partition) in tokenized.tokenizers.",
)

tokenize_job = dg.define_asset_job(
    "tokenize",
    selection=dg.AssetSelection.assets(TOKENIZED_DOCUMENTS),
    description="Tokenize one (tokenizer, crawl segment) partition of kept documents, then check checksums.",
)

register_benchmark_job = dg.define_asset_job(
    "register_benchmark",
    selection=dg.AssetSelection.assets(EVAL_ITEMS),
    description="Read one benchmark (a `benchmarks` partition) into quarantine.eval_items.",
)

decontaminate_job = dg.define_asset_job(
    "decontaminate",
    selection=dg.AssetSelection.assets(MATCHES),
    description="Match one segment's kept documents against one benchmark's items (benchmark x segment).",
)

run_view_candidate_job = dg.define_asset_job(
    "run_view_candidate",
    selection=dg.AssetSelection.assets(CANDIDATE),
    description="Build a run view candidate from its config (mixture, seed, packing) and run its blocking checks; "
                "then a reviewer publishes it with the publish_run_view job.",
)

jobs = [raw_ingest_job, curate_models_job, curate_job, exact_dedup_job, minhash_job, near_dedup_job,
        register_tokenizer_job, tokenize_job, register_benchmark_job, decontaminate_job,
        run_view_candidate_job]
