"""Hand-made WARC response records for curation tests: one page per record, served over HTTP/1.1."""

from __future__ import annotations

import io
import uuid

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter


def response_record(
    url: str, body: bytes, content_type: str = "text/html; charset=utf-8", status: str = "200 OK"
) -> bytes:
    """One gzipped WARC response record of `body` from `url`; its record id is the uuid5 of the URL, so records
    of different URLs never share an id."""
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True)
    http = StatusAndHeaders(
        status, [("Content-Type", content_type), ("Content-Length", str(len(body)))], protocol="HTTP/1.1"
    )
    rec = writer.create_warc_record(
        url,
        "response",
        payload=io.BytesIO(body),
        http_headers=http,
        warc_headers_dict={"WARC-Record-ID": f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url)}>"},
    )
    writer.write_record(rec)
    return buf.getvalue()
