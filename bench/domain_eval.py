"""The domain classifier with and without URL features on the held-out real pages (data/domain/eval.jsonl):
per-class precision/recall and the unknown slice, on every page and on pages whose host has no training page,
each read with the page's real URL and without it. Needs only the repo's data.

    .venv/bin/python bench/domain_eval.py            # both models (use_url False, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from assets.curated import domain


def table(title: str, rows: list[dict]) -> str:
    lines = [
        f"{title}",
        "| class | support | predicted | correct | precision | recall | unknown |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['support']} | {r['predicted']} | {r['correct']} | {r['precision']:.3f} "
            f"| {r['recall']:.3f} | {r['unknown']} |"
        )
    return "\n".join(lines)


def report(model: domain.DomainModel, held_out: list[dict]) -> str:
    """Four tables: all pages / unseen hosts, each with and without the URL."""
    out = []
    unseen = [r for r in held_out if not r["host_in_training"]]
    for name, rows in (("all held-out pages", held_out), ("hosts not in training", unseen)):
        for with_url in (True, False):
            urls = [r["url"] if with_url else None for r in rows]
            preds = model.predict([r["text"] for r in rows], urls)
            table_rows = domain.evaluate([r["label"] for r in rows], [p for p, _ in preds])
            out.append(table(f"{name} ({len(rows)}), {'with' if with_url else 'without'} the URL", table_rows))
    return "\n\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--use-url", choices=["both", "true", "false"], default="both")
    args = ap.parse_args()
    held_out = domain.read_jsonl(domain.EVAL_PATH)
    variants = {"both": (False, True), "true": (True,), "false": (False,)}[args.use_url]
    for use_url in variants:
        model = domain.train(dataclasses.replace(domain.DomainModelParams(), use_url=use_url))
        info = model.info
        print(
            f"## use_url={use_url}: model {model.digest[:12]}, threshold {model.threshold:.2f} "
            f"(out-of-fold on {info['threshold_documents']} training documents: accuracy {info['oof_accuracy']}, "
            f"confident {info['oof_confident_accuracy']}, unknown {info['oof_unknown_share']})\n"
        )
        print(report(model, held_out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
