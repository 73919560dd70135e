"""Model files as resources: the KenLM model for perplexity and the tokenizers (local files only)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from iceberg_catalog import tokenlake_home


def reference_lm_path() -> Path:
    """Where the `curated/reference_lm` asset writes its ARPA model."""
    return tokenlake_home() / "models" / "reference_lm" / "reference_lm.arpa"


class LanguageModelResource(dg.ConfigurableResource):
    """The KenLM model (ARPA or KenLM binary) used for perplexity. Empty `model_path` means the model built
    by the `curated/reference_lm` asset under TOKENLAKE_HOME."""

    model_path: str = ""

    def path(self) -> str:
        p = Path(self.model_path).expanduser() if self.model_path else reference_lm_path()
        if not p.is_file():
            hint = (
                "materialise curated/reference_lm first (make demo does)"
                if not self.model_path
                else "set lm.model_path to an existing KenLM ARPA or binary file"
            )
            raise FileNotFoundError(f"KenLM model {str(p)!r} does not exist: {hint}")
        return str(p)


REPO_TOKENIZERS = Path(__file__).resolve().parent.parent / "data" / "tokenizers"
DEFAULT_TOKENIZERS = {
    "gpt2": str(REPO_TOKENIZERS / "gpt2_tokenizer.json"),
    "olmo2-cl100k": str(REPO_TOKENIZERS / "olmo2_dolma2_cl100k_tokenizer.json"),
}


class TokenizerResource(dg.ConfigurableResource):
    """Named local tokenizer.json files (never a hub download). A name is a partition key of the
    `tokenizers` dimension; add your own as `{name: path}`."""

    paths: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_TOKENIZERS))

    def path(self, name: str) -> str:
        if name not in self.paths:
            raise KeyError(f"unknown tokenizer {name!r}: configure it in tokenizer.paths (known: {sorted(self.paths)})")
        return self.paths[name]
