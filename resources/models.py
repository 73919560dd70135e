"""Model files as resources: the KenLM model that scores perplexity (ours by default, or the user's)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

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
            hint = ("materialise curated/reference_lm first (make demo does)" if not self.model_path
                    else "set lm.model_path to an existing KenLM ARPA or binary file")
            raise FileNotFoundError(f"KenLM model {str(p)!r} does not exist: {hint}")
        return str(p)
