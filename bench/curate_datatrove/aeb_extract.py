"""datatrove's Trafilatura block (FineWeb settings, its own sandbox and 1 s timeout) over the ScrapingHub
Article Extraction Benchmark pages, decoded the way datatrove's WarcReader decodes a response. Runs inside
datatrove's venv; prints one JSON object {page id: extracted text or null}.

    python aeb_extract.py --tar scrapinghub_aeb_4a3bc979.tar
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tarfile

PREFIX = "article-extraction-benchmark/"


def decode_like_warc_reader(content: bytes) -> str | None:
    """datatrove.pipeline.readers.warc.process_record's decoding: UTF-8, else cchardet's guess, else skip."""
    import cchardet

    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        enc = cchardet.detect(content)["encoding"]
        if not enc or enc == "UTF-8":
            return None
        try:
            return content.decode(enc)
        except (UnicodeDecodeError, LookupError):
            return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tar", required=True)
    args = parser.parse_args()

    from datatrove.data import Document
    from datatrove.pipeline.extractors import Trafilatura

    with tarfile.open(args.tar) as tar:
        truth = json.load(tar.extractfile(PREFIX + "ground-truth.json"))
        docs = []
        for page_id in sorted(truth):
            html = decode_like_warc_reader(gzip.decompress(tar.extractfile(f"{PREFIX}html/{page_id}.html.gz").read()))
            if html is not None:
                docs.append(Document(text=html, id=page_id, metadata={"url": truth[page_id]["url"]}))

    out: dict[str, str | None] = {page_id: None for page_id in truth}
    for doc in Trafilatura(favour_precision=True).run(iter(docs)):
        out[doc.id] = doc.text
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
