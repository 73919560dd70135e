"""HTML decoding, text normalisation and trafilatura extraction under size and time limits.

Real pages come from the repo's sample crawl (a real Common Crawl excerpt); hostile pages are generated
here, in memory (a 20 MB page is not committed).
"""

import os
import random
import signal
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from assets.curated import extract as extract_module
from assets.curated.extract import (
    DECISION_EMPTY,
    DECISION_EXTRACT_FAILED,
    DECISION_EXTRACT_TIMEOUT,
    DECISION_TOO_LARGE,
    Extractor,
    ExtractorError,
    binary_reason,
    decode_html,
    normalise_text,
)

ROOT = Path(__file__).resolve().parents[2]
CC_WARC = (
    ROOT
    / "data/sample_crawl/crawl-data/CC-MAIN-2020-34/segments/1596439738015.38/warc"
    / "CC-MAIN-20200808165417-20200808195417-00395.warc.gz"
)
DECISIONS = {None, DECISION_EMPTY, DECISION_EXTRACT_FAILED, DECISION_EXTRACT_TIMEOUT, DECISION_TOO_LARGE}
ARTICLE = (
    "<p>The river rose three metres overnight and the old stone bridge, built in 1823, was closed to traffic "
    "for the first time in living memory. Engineers inspected the piers at dawn.</p>"
    "<p>Residents of the lower town were asked to move cars to higher ground, and the school stayed shut. "
    "The mayor said the water should fall again by Thursday if the rain eases as forecast.</p>"
)


def page(body: str = ARTICLE, head: str = "<title>Flood</title>") -> str:
    return f"<!DOCTYPE html><html><head>{head}</head><body><article>{body}</article></body></html>"


# 2.4 MB of 50,000 short paragraphs keeps trafilatura busy for seconds (about 5 s on a 2-core dev box).
SLOW_PAGE = page("".join(f"<p>paragraph {i} with several words of text</p>" for i in range(50_000))).encode()


@pytest.fixture(scope="module")
def real_pages() -> list[tuple[bytes, str | None, str]]:
    items = []
    with CC_WARC.open("rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type == "response":
                items.append(
                    (
                        record.content_stream().read(),
                        record.http_headers.get_header("Content-Type"),
                        record.rec_headers.get_header("WARC-Target-URI"),
                    )
                )
    assert len(items) == 16
    return items


@pytest.fixture(scope="module")
def extractor():
    with Extractor() as ex:
        yield ex


# --- decoding -----------------------------------------------------------------------------------------


def test_http_charset_wins():
    payload = page("<p>Привет, мир! Это проверка кодировки windows-1251.</p>").encode("cp1251")
    assert "Привет, мир!" in decode_html(payload, "text/html; charset=windows-1251")
    assert "Привет, мир!" in decode_html(payload, 'text/html; Charset="Windows-1251"')


def test_meta_charset_and_http_equiv():
    text = "日本語のテキストです。文字コードの確認。"
    sjis = page(f"<p>{text}</p>", head='<meta charset="shift_jis">').encode("shift_jis")
    assert text in decode_html(sjis, "text/html")
    euc = page(f"<p>{text}</p>", head='<meta http-equiv="Content-Type" content="text/html; charset=EUC-JP">').encode(
        "euc_jp"
    )
    assert text in decode_html(euc, None)


def test_whatwg_supersets_for_legacy_labels():
    # iso-8859-1 is decoded as windows-1252 by browsers: 0x80 is the euro sign.
    assert "price 5€" in decode_html(page("<p>price 5\x80</p>").encode("latin-1"), "text/html; charset=iso-8859-1")
    # gb2312 pages use GBK characters (here 镕, outside GB2312).
    text = "朱镕基访问了工厂"
    payload = page(f"<p>{text}</p>", head='<meta charset="gb2312">').encode("gbk")
    assert text in decode_html(payload, None)


def test_wrong_declared_charset_falls_back():
    latin = page("<p>Un café très crème à Besançon.</p>").encode("cp1252")
    assert "Un café très crème à Besançon." in decode_html(latin, "text/html; charset=utf-8")
    utf8 = page("<p>Grüße aus Köln</p>").encode("utf-8")
    # A copied "charset=utf-16" on a page without NUL bytes is ignored.
    assert "Grüße aus Köln" in decode_html(utf8, "text/html; charset=utf-16")
    assert "Grüße aus Köln" in decode_html(utf8, "text/html; charset=x-no-such-charset")


def test_valid_utf8_beats_a_legacy_label_but_ascii_follows_the_label():
    utf8 = page("<p>Ein schöner Tag in Zürich</p>").encode("utf-8")
    assert "Ein schöner Tag in Zürich" in decode_html(utf8, "text/html; charset=ISO-8859-1")
    # ISO-2022-JP is 7-bit: only the label can tell it from ASCII.
    text = "日本語のページ"
    jis = page(f"<p>{text}</p>").encode("iso2022_jp")
    assert jis.isascii() and text in decode_html(jis, "text/html; charset=iso-2022-jp")


def test_bad_utf8_keeps_the_good_characters():
    payload = page("<p>naïve façade " * 50 + "</p>").encode("utf-8") + b"\xff\xfe broken tail"
    text = decode_html(payload, None)
    assert "naïve façade" in text and "\ufffd" in text
    # Mostly broken UTF-8 is not worth keeping as UTF-8: cp1252 maps the bytes instead.
    mojibake = bytes(range(0x80, 0x100)) * 20
    text = decode_html(b"<html>" + mojibake, None)
    assert text.startswith("<html>€") and "ÀÁÂ" in text and text.count("\ufffd") == 5 * 20  # cp1252 lacks 5 bytes


def test_bom_decides_and_utf16_is_not_binary():
    payload = "\ufeff".encode("utf-16-le") + page("<p>UTF-16 page</p>").encode("utf-16-le")
    assert "UTF-16 page" in decode_html(payload, "text/html; charset=iso-8859-1")
    assert decode_html(b"\xef\xbb\xbf" + "<p>é</p>".encode(), "text/html; charset=cp1251") == "<p>é</p>"


def test_binary_labelled_as_html_is_rejected():
    rng = random.Random(0)
    png = b"\x89PNG\r\n\x1a\n" + rng.randbytes(5000)
    assert decode_html(png, "text/html") is None
    assert "png" in binary_reason(png)
    noise = rng.randbytes(10_000)
    assert decode_html(noise, "text/html; charset=utf-8") is None
    assert "control bytes" in binary_reason(noise)
    assert decode_html(b"<html>" + b"\x00" * 200 + b"</html>", "text/html") is None


def test_stray_control_bytes_in_real_text_are_dropped_not_fatal():
    payload = page("<p>" + "ordinary words " * 100 + "\x00\x01 end</p>").encode()
    text = decode_html(payload, "text/html")
    assert text is not None and "\x00" not in text and "\x01" not in text and "end" in text


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=2000),
    st.one_of(
        st.none(),
        st.sampled_from(
            [
                "text/html",
                "text/html; charset=utf-8",
                "text/html; charset=shift_jis",
                "text/html; charset=bogus",
                "text/html; charset=utf-16",
                "text/html; charset=base64",
                "text/html; charset=idna",
                "text/html; charset=unicode_escape",
                "text/html; charset=rot13",
                "text/html; charset=iso-2022-jp",
            ]
        ),
    ),
)
def test_decode_never_raises_and_gives_lxml_safe_text(payload, content_type):
    text = decode_html(payload, content_type)
    if text is not None:
        assert not any(unicodedata.category(c) == "Cc" and c not in "\t\n\r\x0c" for c in text)
        text.encode("utf-8")  # no lone surrogates


# --- normalisation -------------------------------------------------------------------------------------


def test_normalise_text_examples():
    assert normalise_text("  a \t b  \r\n\r\n\r\n\n c\u00a0\u00a0d \n") == "a b\n\nc d"
    assert normalise_text("line one  \n   line two") == "line one\nline two"
    assert normalise_text("Cafe\u0301") == "Café"  # NFC
    assert normalise_text("a\u2028b\x0cc") == "a\nb\nc"
    assert normalise_text("e\x00\u0301") == "é"
    assert normalise_text(" \n\t\n ") == ""


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_normalise_text_is_idempotent_and_tidy(text):
    once = normalise_text(text)
    assert normalise_text(once) == once
    assert once == once.strip() and "  " not in once and "\n\n\n" not in once and "\t" not in once
    assert unicodedata.is_normalized("NFC", once)


# --- extraction ----------------------------------------------------------------------------------------


def test_extracts_main_text_without_boilerplate(extractor):
    html = page(
        ARTICLE,
        head="<title>Flood</title><script>var tracking = 1;</script><style>p {color: red}</style>",
    ).replace("<body>", "<body><nav><a href='/'>Home</a> | <a href='/news'>News</a></nav>")
    result = extractor.extract(html.encode(), "text/html; charset=utf-8", "https://example.org/flood")
    assert result.decision is None and result.seconds >= 0
    assert "old stone bridge" in result.text and "higher ground" in result.text
    assert "tracking" not in result.text and "color: red" not in result.text
    assert result.text == normalise_text(result.text)


def test_real_pages_are_deterministic_and_order_independent(extractor, real_pages):
    results = extractor.extract_many(real_pages)
    assert [r.decision for r in results].count(None) >= 14
    assert all(r.decision in DECISIONS for r in results)
    # A second worker, documents in reverse order: same text for every page.
    with Extractor() as other:
        reverse = other.extract_many(real_pages[::-1])[::-1]
    assert [(r.text, r.decision) for r in results] == [(r.text, r.decision) for r in reverse]
    by_url = {url: r for (_, _, url), r in zip(real_pages, results)}
    # windows-1251 page whose charset comes from the HTTP header
    assert "Мы работаем в Москве" in by_url["http://01spb.ru/company/"].text


def test_concurrent_threads_share_one_extractor(extractor, real_pages):
    expected = [extractor.extract(*item) for item in real_pages]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda item: extractor.extract(*item), real_pages))
    assert [(r.text, r.decision) for r in got] == [(r.text, r.decision) for r in expected]


def test_empty_and_whitespace_payloads(extractor):
    assert extractor.extract(b"", "text/html").decision == DECISION_EMPTY
    assert extractor.extract(b" \r\n ", "text/html").decision == DECISION_EMPTY
    result = extractor.extract(b"<html><head><script>var x = 1;</script></head><body> </body></html>", "text/html")
    assert result.text is None and result.decision == DECISION_EMPTY


def test_binary_payload_is_a_decision_with_a_reason(extractor):
    result = extractor.extract(b"%PDF-1.7\n" + random.Random(1).randbytes(20_000), "text/html")
    assert result.decision == DECISION_EXTRACT_FAILED and result.text is None and "pdf" in result.detail


def test_invalid_encodings_still_extract(extractor):
    bad_utf8 = page(ARTICLE.replace("1823", "1823 \xe9t\xe9")).encode("latin-1") + b"\xc3\x28\xa0\xa1"
    for content_type in ("text/html; charset=utf-8", "text/html; charset=shift_jis", None):
        result = extractor.extract(bad_utf8, content_type)
        assert result.decision is None and "old stone bridge" in result.text


def test_deeply_nested_html_gets_a_decision(extractor):
    depth = 100_000
    html = ("<html><body>" + "<div>" * depth + ARTICLE + "</div>" * depth + "</body></html>").encode()
    result = extractor.extract(html, "text/html")
    assert result.decision in DECISIONS
    assert result.decision is not None or "bridge" in result.text
    # The extractor is still usable afterwards.
    assert extractor.extract(page().encode(), "text/html").decision is None


def test_twenty_megabyte_page_is_too_large(extractor):
    huge = page("<p>" + "filler text " * 1_750_000 + "</p>").encode()
    assert len(huge) > 20_000_000
    result = extractor.extract(huge, "text/html")
    assert result.decision == DECISION_TOO_LARGE and "max_html_bytes" in result.detail


def test_timeout_kills_the_worker_and_the_next_document_succeeds():
    huge = SLOW_PAGE  # a 50 ms limit is two orders of magnitude below its extraction time
    with Extractor(timeout_s=0.05, max_html_bytes=len(huge) + 1) as ex:
        assert ex.extract(page().encode(), "text/html").decision is None
        first_pid = ex._worker.pid

        # Called from a worker thread: the limit must not depend on signals in the main thread.
        with ThreadPoolExecutor(max_workers=1) as pool:
            result = pool.submit(ex.extract, huge, "text/html").result()
        assert result.decision == DECISION_EXTRACT_TIMEOUT and result.text is None
        assert ex._worker is None  # the stuck worker was killed

        after = ex.extract(page().encode(), "text/html")
        assert after.decision is None and "old stone bridge" in after.text
        assert ex._worker.pid != first_pid


def test_a_dead_worker_is_a_decision_and_is_replaced():
    with Extractor() as ex:
        assert ex.extract(page().encode(), "text/html").decision is None
        os.kill(ex._worker.pid, signal.SIGKILL)
        result = ex.extract(page().encode(), "text/html")
        assert result.decision == DECISION_EXTRACT_FAILED and "died" in result.detail
        assert ex.extract(page().encode(), "text/html").decision is None


def test_worker_is_recycled_and_closed():
    with Extractor(recycle_after_docs=2) as ex:
        pids = []
        for _ in range(3):
            assert ex.extract(page().encode(), "text/html").decision is None
            pids.append(ex._worker.pid)
        assert pids[0] == pids[1] != pids[2]
        template = ex._template.proc.pid
    assert not any(alive(pid) for pid in [*pids, template])  # leaving the context stops every process


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), None once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].decode().split()
    except FileNotFoundError:
        return None


def alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def parent_of(pid: int) -> int:
    return int(stat_fields(pid)[1])


def cpu_of(pid: int) -> float:
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_restart_after_a_timeout_forks_the_template_and_gives_the_same_texts(real_pages):
    with Extractor() as fresh:
        expected = [fresh.extract(*item).text for item in real_pages[:6]]
    with Extractor(timeout_s=1.0, max_html_bytes=len(SLOW_PAGE) + 1) as ex:
        assert ex.extract(page().encode(), "text/html").decision is None
        template = ex._template.proc.pid
        assert ex.extract(SLOW_PAGE, "text/html").decision == DECISION_EXTRACT_TIMEOUT
        got = [ex.extract(*item).text for item in real_pages[:6]]
        assert got == expected
        # The new worker is a fork of the same warmed-up template, not a new interpreter: its start and
        # first pages cost a few CPU ms (a fresh interpreter needs ~0.3-0.5 s to import trafilatura and
        # warm up before its first page is done).
        assert ex._template.proc.pid == template and parent_of(ex._worker.pid) == template
        restarted = ex._worker.pid
        assert ex.extract(page().encode(), "text/html").decision is None
        assert ex._worker.pid == restarted
    with Extractor() as ex:
        assert ex.extract(page().encode(), "text/html").decision is None
        ex._drop_worker()
        assert ex.extract(page().encode(), "text/html").decision is None
        assert parent_of(ex._worker.pid) == ex._template.proc.pid
        assert cpu_of(ex._worker.pid) < 0.1


def test_killing_the_template_mid_run_loses_nothing():
    with Extractor(timeout_s=1.0, max_html_bytes=len(SLOW_PAGE) + 1) as ex:
        assert ex.extract(page().encode(), "text/html").decision is None
        old_template, old_worker = ex._template.proc, ex._worker.pid
        os.kill(old_template.pid, signal.SIGKILL)
        old_template.wait()
        assert ex.extract(page().encode(), "text/html").decision is None  # the worker outlives its template
        assert ex.extract(SLOW_PAGE, "text/html").decision == DECISION_EXTRACT_TIMEOUT
        after = ex.extract(page().encode(), "text/html")
        assert after.decision is None and "old stone bridge" in after.text
        assert ex._template.proc.pid != old_template.pid and parent_of(ex._worker.pid) == ex._template.proc.pid
        pids = [ex._worker.pid, ex._template.proc.pid]
    assert not alive(old_worker)  # killed through its pidfd once its template was gone
    assert not any(alive(pid) for pid in pids)


def test_a_template_that_cannot_fork_falls_back_to_a_fresh_interpreter(monkeypatch):
    monkeypatch.setattr(extract_module, "_TEMPLATE_REPLY_S", 0.5)
    with Extractor() as ex:
        assert ex.extract(page().encode(), "text/html").decision is None
        template = ex._template.proc.pid
        os.kill(template, signal.SIGSTOP)  # alive but unresponsive: the fork request goes unanswered
        ex._drop_worker()
        after = ex.extract(page().encode(), "text/html")
        assert after.decision is None and "old stone bridge" in after.text
        assert parent_of(ex._worker.pid) == os.getpid() and ex._template is None
        assert not alive(template)
        worker = ex._worker.pid
    assert not alive(worker)


def test_bad_options_fail_loudly():
    with pytest.raises(ExtractorError, match="no_such_option"):
        Extractor(no_such_option=True).extract(page().encode(), "text/html")
    with pytest.raises(ValueError, match="timeout_s"):
        Extractor(timeout_s=0)
