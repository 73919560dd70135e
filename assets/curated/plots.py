"""Small plots for asset metadata (rendered as Markdown images in the Dagster UI). No Dagster here."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence


def histogram_png(values: Sequence[float], title: str, xlabel: str, *, log_x: bool = True, bins: int = 30) -> bytes:
    """A PNG histogram of `values` (log10 x-axis by default, as perplexities span decades)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = [math.log10(v) for v in values if v and v > 0] if log_x else list(values)
    fig, ax = plt.subplots(figsize=(6, 3), dpi=80)
    ax.hist(data, bins=bins, color="#4f6bed")
    ax.set_title(title)
    ax.set_xlabel(f"log10 {xlabel}" if log_x else xlabel)
    ax.set_ylabel("documents")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"
