"""Small plots for asset metadata, as PNG embedded in Markdown (the Dagster UI renders it). No Dagster,
no plotting library: a histogram is a few rectangles, encoded with zlib (importing matplotlib alone costs
more than a partition's plot)."""

from __future__ import annotations

import base64
import math
import struct
import zlib
from collections.abc import Sequence

import numpy as np

_BAR = (79, 107, 237)
_BAR2 = (237, 140, 79)
_AXIS = (90, 90, 90)


def encode_png(rgb: np.ndarray) -> bytes:
    """Encode an (h, w, 3) uint8 image as PNG."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def histogram(values: Sequence[float], bins: int = 30, log10: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Counts and bin edges of `values` (of log10 of the positive values by default)."""
    data = np.array([math.log10(v) for v in values if v and v > 0] if log10 else list(values), dtype=float)
    if data.size == 0:
        return np.zeros(bins, int), np.linspace(0, 1, bins + 1)
    lo, hi = float(data.min()), float(data.max())
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    return np.histogram(data, bins=bins, range=(lo, hi))


def histogram_png(counts: np.ndarray, width: int = 360, height: int = 120) -> bytes:
    """A bar chart of `counts` with a baseline, white background."""
    img = np.full((height, width, 3), 255, np.uint8)
    n = len(counts)
    peak = max(int(counts.max()), 1) if n else 1
    bar_w = max((width - 4) // max(n, 1), 1)
    for i, c in enumerate(counts):
        bar_h = int(round((height - 6) * int(c) / peak))
        if bar_h:
            x0 = 2 + i * bar_w
            img[height - 2 - bar_h : height - 2, x0 : x0 + max(bar_w - 1, 1)] = _BAR
    img[height - 2, :] = _AXIS
    return encode_png(img)


def histogram_markdown(values: Sequence[float], title: str, unit: str = "perplexity") -> str:
    """Markdown: a title, the PNG histogram of log10(values) and its x-range."""
    counts, edges = histogram(values)
    png = histogram_png(counts)
    return (
        f"**{title}** ({int(counts.sum())} documents; x: log10 {unit} from {edges[0]:.2f} to {edges[-1]:.2f})\n\n"
        f"![{unit} histogram](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"
    )


def paired_bars_png(pairs: Sequence[tuple[float, float]], width: int = 360, height: int = 120) -> bytes:
    """Side-by-side bars per group: the first value blue, the second orange, on a common scale."""
    img = np.full((height, width, 3), 255, np.uint8)
    peak = max([max(a, b) for a, b in pairs] + [1e-12])
    group_w = max((width - 4) // max(len(pairs), 1), 4)
    bar_w = max(group_w // 3, 1)
    for i, values in enumerate(pairs):
        for j, (v, colour) in enumerate(zip(values, (_BAR, _BAR2))):
            bar_h = int(round((height - 6) * v / peak))
            if bar_h:
                x0 = 2 + i * group_w + j * bar_w + bar_w // 2
                img[height - 2 - bar_h : height - 2, x0 : x0 + max(bar_w - 1, 1)] = colour
    img[height - 2, :] = _AXIS
    return encode_png(img)


def paired_bars_markdown(
    labels: Sequence[str],
    first: Sequence[float],
    second: Sequence[float],
    title: str,
    names: tuple[str, str] = ("requested", "realised"),
) -> str:
    """Markdown: a title naming the groups in order, and the PNG of paired bars."""
    png = paired_bars_png(list(zip(first, second)))
    return (
        f"**{title}** (left to right: {', '.join(labels)}; blue {names[0]}, orange {names[1]})\n\n"
        f"![{title}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"
    )
