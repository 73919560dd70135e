"""datatrove's MinHash stage 1 (`MinhashDedupSignature`) on a folder of JSONL documents, timed in parts. Runs
inside datatrove's own venv (bench/dedup.py creates or reuses it); never imports tokenlake.

    python minhash_signatures.py --input DIR --work DIR [--n-grams 5 --buckets 14 --hashes 8 --seed 1]

Prints one JSON line with the CPU and wall seconds of each part, so the caller can separate them from the
whole child process it measures:
- imports: importing datatrove and building the step (its English word tokenizer included);
- reader: `JsonlReader` reading every document into memory;
- step: `MinhashDedupSignature.run` over those documents as datatrove runs it (signatures, 14 bucket files
  written, each sorted and verified);
- core: only `get_shingles` + `get_signature` per document, the computation our `signatures()` does.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import json
import resource
import time
from pathlib import Path


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Timer:
    def __init__(self, out: dict, name: str) -> None:
        self.out, self.name = out, name

    def __enter__(self):
        self.cpu0, self.t0 = cpu_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.out[f"{self.name}_cpu_s"] = cpu_seconds() - self.cpu0
        self.out[f"{self.name}_wall_s"] = time.perf_counter() - self.t0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", type=Path, required=True, help="folder of *.jsonl files ({'id', 'text'})")
    parser.add_argument("--work", type=Path, required=True, help="empty folder for the signature files")
    parser.add_argument("--n-grams", type=int, default=5)
    parser.add_argument("--buckets", type=int, default=14)
    parser.add_argument("--hashes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--precision", type=int, default=64, choices=[32, 64], help="datatrove's default: 64")
    parser.add_argument("--hash-fc", default="xxhash", choices=["xxhash", "sha1"], help="datatrove's default")
    args = parser.parse_args()
    out: dict = {}

    with Timer(out, "imports"):
        import datatrove
        from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
        from datatrove.pipeline.readers import JsonlReader
        from datatrove.utils.hashing import HashConfig

        config = MinhashConfig(
            n_grams=args.n_grams,
            num_buckets=args.buckets,
            hashes_per_bucket=args.hashes,
            seed=args.seed,
            hash_config=HashConfig(precision=args.precision, hash_fc=args.hash_fc),
        )
        step = MinhashDedupSignature(output_folder=str(args.work / "signatures"), config=config)
        step.get_signature(step.get_shingles("a warm up text of more than five words"))  # tokenizer, parameters
    out["datatrove"] = getattr(datatrove, "__version__", None) or importlib.metadata.version("datatrove")
    out["config"] = str(config)

    with Timer(out, "reader"):
        docs = list(JsonlReader(str(args.input), glob_pattern="*.jsonl").run(None, rank=0, world_size=1))
    out["documents"] = len(docs)

    with Timer(out, "step"):
        res = step.run(iter(docs), rank=0, world_size=1)
        if inspect.isgenerator(res):
            for _ in res:
                pass

    n_shingles = n_signed = 0
    with Timer(out, "core"):
        for doc in docs:
            sh = step.get_shingles(doc.text)
            if sh.size:
                step.get_signature(sh)
                n_signed += 1
                n_shingles += sh.shape[0]
    out["signed_documents"] = n_signed
    out["shingles"] = n_shingles
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
