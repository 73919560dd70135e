"""The `extractor` knob: resiliparse beside trafilatura under the same decoding, limits and bad-input handling,
recorded in the config hash and the thresholds policy only when it is not the default (so every default hash
and policy stays what it was), and a resiliparse run of real WARC data through Dagster with deterministic rows.

Real pages come from the repo's sample crawl; hostile pages are generated here, in memory.
"""

from __future__ import annotations

import os
import random

import pytest

from assets.curated import defs as curated_defs
from assets.curated import extract as extract_module
from assets.curated.pipeline import CurateParams
from assets.curated.policy import governed_params, thresholds_of, with_thresholds
from assets.governance import policies, proposals
from iceberg_catalog import Lakehouse, Provenance, config_hash
from iceberg_catalog.schemas import CURATED_DOCUMENTS
from tests.curated.test_curated_asset import WGET, comparable, curate_documents, curate_segments, docs
from tests.curated.test_curation_workers import no_pools  # noqa: F401 - a fixture
from tests.curated.test_extract import ARTICLE, DECISIONS, page, real_pages  # noqa: F401 - real_pages is a fixture

# What the defaults hashed to before the knob existed (commit 3088c0f): a default run's config hash and the
# thresholds policy's version 0 must not move.
DEFAULT_CONFIG_HASH = "c3ec2ef2f2ee620f692db5a3653c2309724a66251c929a6ebf7686a90c6fdfd1"
DEFAULT_THRESHOLDS_SHA256 = "90d01d6ad2648b7029f320a4c3842aa3f46394ef1d715593f31a970943947528"
RESILIPARSE = CurateParams(extractor="resiliparse")
WGET_KEY = "LEGACY-ARCHIVES/wget-2024"


@pytest.fixture(scope="module")
def extractor():
    with extract_module.Extractor(engine="resiliparse") as ex:
        yield ex


def test_extracts_main_text_without_boilerplate(extractor):
    html = page(
        ARTICLE + "<ul><li>first item of the list</li><li>second item of the list</li></ul>",
        head="<title>Flood</title><script>var tracking = 1;</script><style>p {color: red}</style>",
    ).replace("<body>", "<body><nav><a href='/'>Home</a> | <a href='/news'>News</a></nav>")
    html = html.replace("</article>", "<img alt='a photo of the bridge'><form><input value='search'></form></article>")
    result = extractor.extract(html.encode(), "text/html; charset=utf-8", "https://example.org/flood")
    assert result.decision is None  # its timing: bench/extraction.py (speed vs trafilatura)
    assert "old stone bridge" in result.text and "higher ground" in result.text
    assert "tracking" not in result.text and "color: red" not in result.text
    assert "a photo of the bridge" not in result.text and "search" not in result.text  # no alt texts, no forms
    assert result.text == extract_module.normalise_text(result.text)


def test_real_pages_are_deterministic_and_decoded_like_trafilatura(extractor, real_pages):  # noqa: F811
    results = extractor.extract_many(real_pages)
    assert all(r.decision in DECISIONS for r in results) and [r.decision for r in results].count(None) >= 14
    with extract_module.Extractor(engine="resiliparse") as other:
        reverse = other.extract_many(real_pages[::-1])[::-1]
    assert [(r.text, r.decision) for r in results] == [(r.text, r.decision) for r in reverse]
    by_url = {url: r for (_, _, url), r in zip(real_pages, results)}
    # windows-1251 page whose charset comes from the HTTP header: decoded by our code, not the engine
    assert "Мы работаем в Москве" in by_url["http://01spb.ru/company/"].text


def test_malformed_pages_are_rows_with_a_reason(extractor):
    """Every bad input the trafilatura path survives is a decision here too, and the worker serves on."""
    assert extractor.extract(b"%PDF-1.7\n" + random.Random(1).randbytes(20_000), "text/html").decision == (
        extract_module.DECISION_EXTRACT_FAILED
    )
    assert extractor.extract(b" \r\n ", "text/html").decision == extract_module.DECISION_EMPTY
    assert extractor.extract(b"<html><head><script>x = 1;</script></head><body> </body></html>").decision == (
        extract_module.DECISION_EMPTY
    )
    broken = b"<html><body><div><p>unclosed <b><i>tags</div></span>\xff\xfe<<<>>></p" + b"<table><tr>" * 5000
    assert extractor.extract(broken, "text/html; charset=utf-8").decision in DECISIONS
    depth = 100_000
    nested = ("<html><body>" + "<div>" * depth + ARTICLE + "</div>" * depth + "</body></html>").encode()
    result = extractor.extract(nested, "text/html")
    assert result.decision in DECISIONS and (result.decision is not None or "bridge" in result.text)
    assert extractor.extract(page().encode(), "text/html").decision is None


def test_the_same_limits_apply():
    """The size limit before decoding and the CPU-second limit per page, then a fresh worker for the next."""
    slow = page("".join(f"<p>paragraph {i} with several words of text</p>" for i in range(400_000))).encode()
    with extract_module.Extractor(timeout_s=0.02, max_html_bytes=len(slow) + 1, engine="resiliparse") as ex:
        assert ex.extract(slow, "text/html").decision == extract_module.DECISION_EXTRACT_TIMEOUT
        assert ex.extract(page().encode(), "text/html").decision is None
    with extract_module.Extractor(max_html_bytes=1000, engine="resiliparse") as ex:
        assert ex.extract(b"<p>" + b"x" * 2000, "text/html").decision == extract_module.DECISION_TOO_LARGE


def test_a_dead_worker_is_a_decision_and_is_replaced(extractor):
    extractor.extract(page().encode(), "text/html")
    os.kill(extractor._worker.pid, 9)
    assert extractor.extract(page().encode(), "text/html").decision == extract_module.DECISION_EXTRACT_FAILED
    assert extractor.extract(page().encode(), "text/html").decision is None


def test_unknown_engines_and_options_fail_loudly():
    with pytest.raises(ValueError, match="resiliparse"):
        extract_module.Extractor(engine="justext")
    with (
        pytest.raises(extract_module.ExtractorError, match="bogus"),
        extract_module.Extractor(engine="resiliparse", bogus=True) as ex,
    ):
        ex.extract(page().encode(), "text/html")
    with pytest.raises(ValueError, match="extractor must be one of"):
        CurateParams(extractor="justext")


# --- recorded like every knob, without moving a default hash ---------------------------------------------


def test_the_knob_is_hashed_only_when_it_is_not_the_default():
    assert "extractor" not in CurateParams().hashed()
    assert config_hash(CurateParams().hashed()) == DEFAULT_CONFIG_HASH
    assert RESILIPARSE.hashed()["extractor"] == "resiliparse"
    assert config_hash(RESILIPARSE.hashed()) != DEFAULT_CONFIG_HASH


def test_the_extractor_is_a_thresholds_policy_field(lakehouse):
    """Version 0 keeps its bytes; a proposal can switch the extractor; a version without the field (every version
    stored before it existed) means trafilatura; a run's config that picks it is an ad-hoc experiment."""
    v0 = policies.builtin("thresholds")
    assert v0.sha256 == DEFAULT_THRESHOLDS_SHA256 and "extractor" not in v0.policy
    switched = proposals.set_threshold(v0.policy, "extractor", "resiliparse")
    assert proposals.diff(v0.policy, switched) == [{"path": "extractor", "old": None, "new": "resiliparse"}]
    assert with_thresholds(CurateParams(), policies.validate_policy("thresholds", switched)) == RESILIPARSE
    assert with_thresholds(RESILIPARSE, v0.policy) == CurateParams()
    assert thresholds_of(RESILIPARSE) == switched
    with pytest.raises(ValueError, match="extractor must be one of"):
        policies.validate_policy("thresholds", {**switched, "extractor": "justext"})
    prov = Provenance("governance/proposals", "test", "test-run", "test", "test")
    stored = policies.store.Policy("thresholds", 1, switched, "active", 0, "alice", "bob", "prop-1")
    policies._write(lakehouse, "thresholds", [stored], prov)
    params, stamp = governed_params(lakehouse, CurateParams())
    assert params == RESILIPARSE and stamp["policy-version"] == "thresholds/1"
    params, stamp = governed_params(lakehouse, RESILIPARSE)  # the config asks for what is approved: ad hoc
    assert params == RESILIPARSE and stamp["policy-version"] == "thresholds/adhoc"


# --- a resiliparse run through Dagster ------------------------------------------------------------------------


@pytest.mark.usefixtures("no_pools")
def test_a_resiliparse_run_of_sample_warcs_is_deterministic(tokenlake_home, instance, crawl_root, reference_lm_file):
    """One row per HTML response with a reason or kept; the same rows (and config hash) again with two worker
    processes; the snapshot says the run was an ad-hoc experiment and the metadata names the extractor."""
    root = crawl_root({WGET_KEY: {p.name: p for p in WGET}})
    config = {"ops": {"curated__documents": {"config": {"extractor": "resiliparse"}}}}
    curate_segments(instance, root, [WGET_KEY], reference_lm_file, config)
    first = docs()
    rows = first.to_pylist()
    assert len(rows) == 37 and all(r["kept"] == (r["decision"] is None) for r in rows)
    assert sum(r["kept"] for r in rows) > 0
    assert all(r["decision"] != extract_module.DECISION_EXTRACT_FAILED for r in rows)
    prov = _current_provenance()
    assert prov["policy-version"] == "thresholds/adhoc"
    md = instance.get_latest_materialization_event(curated_defs.DOCUMENTS).asset_materialization.metadata
    assert md["extractor"].value == "resiliparse"
    two = {"ops": {"curated__documents": {"config": {"extractor": "resiliparse", "workers": 2, "chunk_docs": 4}}}}
    curate_documents(instance, root, [WGET_KEY], reference_lm_file, two)
    assert comparable(docs()) == comparable(first)
    assert _current_provenance()["config-hash"] == prov["config-hash"]  # workers change no row, nor the hash


def _current_provenance() -> dict:
    snapshot = Lakehouse().table(CURATED_DOCUMENTS).current_snapshot()
    return Provenance.from_snapshot_summary(snapshot.summary.additional_properties)
