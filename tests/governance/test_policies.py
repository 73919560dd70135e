"""Versioned policies: canonical JSON and hashes, version bookkeeping in a real catalog, what curation reads
(the active version, or an ad-hoc Launchpad config), the reviewer list, and the dry-run's polars decision
against the pipeline's own decision functions."""

from __future__ import annotations

import dataclasses
import json

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from assets.curated import policy as curated_policy
from assets.curated.langid import language_decision
from assets.curated.language_rules import rules_for
from assets.curated.pipeline import CurateParams
from assets.curated.quality import QUALITY_SIGNAL_TYPES, QualityThresholds, quality_decision
from assets.governance import policies, proposals
from iceberg_catalog import Provenance
from iceberg_catalog import policy_store as store
from iceberg_catalog.run_view_contract import canonical_json
from iceberg_catalog.schemas import GOVERNANCE_POLICIES
from tests.governance.policy_builders import DOMAIN_CLASSES, document_rows, write_documents

PROV = Provenance("governance/proposals", "test", "test-run", "test", "test")


def test_canonical_json_ignores_key_order_and_hashes_the_bytes():
    a = canonical_json({"b": 1, "a": [1.5, None, "é"]})
    assert a == canonical_json({"a": [1.5, None, "é"], "b": 1}) == '{"a":[1.5,null,"é"],"b":1}'
    assert store.sha256_hex(a) == store.sha256_hex(canonical_json(json.loads(a)))
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_the_default_thresholds_policy_round_trips_to_the_default_params():
    policy = policies.default_policy("thresholds")
    assert curated_policy.with_thresholds(CurateParams(), policy) == CurateParams()
    assert policy["quality"]["gopher_min_words"] == 50 and policy["language_threshold"] == 0.65
    changed = proposals.set_threshold(policy, "quality.gopher_min_words", 30)
    assert curated_policy.with_thresholds(CurateParams(), changed).quality.gopher_min_words == 30
    assert proposals.set_threshold(policy, "gopher_min_words", 30) == changed
    assert proposals.diff(policy, changed) == [{"path": "quality.gopher_min_words", "old": 50, "new": 30}]


def test_unusable_policies_are_refused():
    policy = policies.default_policy("thresholds")
    with pytest.raises(ValueError, match="unknown threshold 'gopher_min_wordz'"):
        proposals.set_threshold(policy, "gopher_min_wordz", 30)
    with pytest.raises(TypeError):
        policies.validate_policy("thresholds", {**policy, "quality": {**policy["quality"], "bogus": 1}})
    with pytest.raises(ValueError, match="exactly"):
        policies.validate_policy("thresholds", {"language_threshold": 0.5})
    with pytest.raises(ValueError, match="components"):
        policies.validate_policy("mixture", {"components": []})
    with pytest.raises(ValueError, match="key_type"):
        policies.validate_policy("deletion", {"rules": [{"key_type": "colour", "value": "red"}]})
    with pytest.raises(ValueError, match="policy kind"):
        policies.default_policy("schedule")


def test_versions_activate_and_restore(lakehouse):
    assert store.versions(lakehouse, "thresholds") == []
    v0 = policies.active(lakehouse, "thresholds")
    assert (v0.version, v0.created_by, v0.label) == (0, store.CODE_DEFAULTS, "thresholds/0")
    new = proposals.set_threshold(v0.policy, "gopher_min_words", 30)
    v1 = policies.activate(lakehouse, "thresholds", new, "agent:tuner", "bob", "prop-1", PROV)
    stored = {p.version: p for p in store.versions(lakehouse, "thresholds")}
    assert {v: p.status for v, p in stored.items()} == {0: "retired", 1: "active"}
    assert (stored[1].parent_version, stored[1].created_by, stored[1].approved_by) == (0, "agent:tuner", "bob")
    assert stored[0].sha256 == v0.sha256 and stored[1].sha256 == store.sha256_hex(canonical_json(new))
    snap = lakehouse.table(GOVERNANCE_POLICIES).current_snapshot()
    assert snap.summary.additional_properties["tokenlake.policy-version"] == "thresholds/1" == v1.label

    restored = policies.restore(lakehouse, "thresholds", 0, PROV)
    stored = {p.version: p.status for p in store.versions(lakehouse, "thresholds")}
    assert stored == {0: "active", 1: "rolled_back"} and restored.policy == v0.policy
    assert policies.active(lakehouse, "mixture").version == 0  # kinds are independent


def test_curation_reads_the_active_version_unless_the_config_is_ad_hoc(lakehouse):
    params, stamp = curated_policy.governed_params(lakehouse, CurateParams())
    assert params == CurateParams() and stamp["policy-version"] == "thresholds/0"
    base = policies.active(lakehouse, "thresholds")
    policies.activate(
        lakehouse, "thresholds", proposals.set_threshold(base.policy, "language_threshold", 0.5), "a", "b", "p", PROV
    )
    params, stamp = curated_policy.governed_params(lakehouse, CurateParams())
    assert params.language_threshold == 0.5 and stamp["policy-version"] == "thresholds/1"
    adhoc = dataclasses.replace(CurateParams(), quality=QualityThresholds(gopher_min_words=10))
    params, stamp = curated_policy.governed_params(lakehouse, adhoc)
    assert params == adhoc and stamp["policy-version"] == store.adhoc_label("thresholds")
    # knobs that decide nothing (workers, chunking) are not an experiment
    params, stamp = curated_policy.governed_params(lakehouse, dataclasses.replace(CurateParams(), workers=2))
    assert params.language_threshold == 0.5 and params.workers == 2 and stamp["policy-version"] == "thresholds/1"


def test_a_version_stored_before_per_language_existed_loads_with_per_language_off(lakehouse):
    """A thresholds version approved before `per_language` (and its rules table) existed judged every language
    by the English rules: it must load so, not with today's default (on); its stored JSON and sha256 stay."""
    old = policies.default_policy("thresholds")
    old["quality"] = {k: v for k, v in old["quality"].items() if k not in ("per_language", "language_rules")}
    stored = store.Policy("thresholds", 1, old, "active", 0, "alice", "bob", "prop-old")
    policies._write(lakehouse, "thresholds", [stored], PROV)
    loaded = policies.active(lakehouse, "thresholds")
    assert "per_language" not in loaded.policy["quality"] and loaded.sha256 == stored.sha256
    params, stamp = curated_policy.governed_params(lakehouse, CurateParams())
    assert params.quality.per_language is False and stamp["policy-version"] == "thresholds/1"
    assert CurateParams().quality.per_language is True  # today's default differs: the stored version decides
    # the dry-run judges a German document by the English rules under that version, as curation would
    signals = _german_signals()
    frame = pl.DataFrame([{**signals, "language": "de", "language_score": 0.9, "decision": None}])
    english = quality_decision(signals, dataclasses.replace(QualityThresholds(), per_language=False))
    assert english == "c4_n_sentences" != quality_decision(signals, rules_for("de", QualityThresholds()).thresholds)
    assert proposals.predicted(frame.lazy(), loaded.policy, "d").collect()["d"].to_list() == [english]
    # turning it on is a proposal like any other (the field the version predates is named in the diff)
    on = proposals.set_threshold(loaded.policy, "per_language", True)
    assert proposals.diff(loaded.policy, on) == [{"path": "quality.per_language", "old": None, "new": True}]
    assert curated_policy.with_thresholds(CurateParams(), on).quality.per_language is True


def _german_signals() -> dict:
    """Signals of a two-sentence German paragraph: the English rules drop it (fewer than 5 sentences), the
    German ones keep it."""
    from assets.curated.quality import quality_signals

    text = (
        "Im Sommer fahren viele Familien aus der Stadt an die Küste, wo sie in kleinen Pensionen wohnen, morgens am "
        "Strand spazieren gehen, mittags frischen Fisch essen und abends den Sonnenuntergang über dem Meer betrachten, "
        "während die Kinder Sandburgen bauen, Muscheln sammeln und im flachen Wasser zwischen den Wellen spielen, bis "
        "es dunkel wird und alle müde zurück in ihre Zimmer gehen. Die Großeltern erzählen dann Geschichten von "
        "früheren Reisen, von Stürmen auf der Nordsee, von alten Leuchttürmen und von Fischern, die jeden Morgen "
        "lange vor Sonnenaufgang mit ihren Booten hinausfuhren."
    )
    return quality_signals(text, rules_for("de", QualityThresholds()).words)


def test_reviewer_list_comes_from_the_instance_configuration(tokenlake_home, monkeypatch):
    assert policies.reviewers() == frozenset()
    tokenlake_home.mkdir(parents=True, exist_ok=True)
    (tokenlake_home / "governance.yaml").write_text("reviewers: [alice, ' bob ']\nfunnel_drift_margin: 0.2\n")
    assert policies.reviewers() == {"alice", "bob"} and policies.funnel_drift_margin() == 0.2
    (tokenlake_home / "governance.yaml").write_text("reviewers: alice\n")
    with pytest.raises(ValueError, match="list of names"):
        policies.reviewers()
    other = tokenlake_home / "elsewhere.yaml"
    other.write_text("reviewers: [carol]\n")
    monkeypatch.setenv(policies.GOVERNANCE_CONFIG_ENV, str(other))
    assert policies.reviewers() == {"carol"}


# ---- the polars decision is the pipeline's decision ---------------------------------------------------------

_FLOAT_SIGNAL = st.floats(min_value=0, max_value=1, allow_nan=False)


def _signals():
    return st.fixed_dictionaries(
        {name: (st.integers(0, 200) if kind == "int" else _FLOAT_SIGNAL) for name, kind in QUALITY_SIGNAL_TYPES.items()}
    )


def _thresholds():
    fields = {f.name: f for f in dataclasses.fields(QualityThresholds)}
    strategies = {}
    for name, f in fields.items():
        if name == "language_rules":
            strategies[name] = st.just(f.default)
        elif isinstance(f.default, bool):
            strategies[name] = st.booleans()
        elif isinstance(f.default, int):
            strategies[name] = st.one_of(st.none(), st.integers(0, 120))
        else:
            strategies[name] = st.one_of(st.none(), _FLOAT_SIGNAL)
    return st.fixed_dictionaries(strategies)


@given(
    rows=st.lists(st.tuples(_signals(), st.floats(0, 1), st.sampled_from(["en", "de", "fr"])), min_size=1, max_size=8),
    quality=_thresholds(),
    language_threshold=st.floats(0, 1),
    allowed=st.one_of(st.none(), st.lists(st.sampled_from(["en", "de", "fr"]), max_size=2)),
)
def test_polars_decision_equals_the_pipeline_decision(rows, quality, language_threshold, allowed):
    policy = {**policies.default_policy("thresholds"), "quality": quality}
    policy.update(language_threshold=language_threshold, allowed_languages=allowed)
    frame = pl.DataFrame(
        [{**s, "language_score": score, "language": lang, "decision": None} for s, score, lang in rows]
    )
    got = proposals.predicted(frame.lazy(), policy, "d").collect()["d"].to_list()
    t = QualityThresholds(**quality)
    want = [  # as the pipeline decides: the quality rules under the document's language's thresholds
        language_decision(lang, score, language_threshold, set(allowed) if allowed is not None else None)
        or quality_decision(s, rules_for(lang, t).thresholds)
        for s, score, lang in rows
    ]
    assert got == want


def test_dry_run_matches_recomputing_every_decision(lakehouse):
    rows = write_documents(lakehouse)
    base = policies.active(lakehouse, "thresholds")
    new = proposals.set_threshold(base.policy, "c4_min_sentences", 1)  # relaxes
    new = proposals.set_threshold(new, "language_threshold", 0.8)  # tightens
    report = proposals.dry_run(lakehouse, "thresholds", base.policy, new)
    assert report["documents"] == len(rows) and report["governed"] == len(rows) - 1
    assert report["baseline_mismatches"] == 0
    # brute force: the pipeline's functions on the same signals under the new params
    params = curated_policy.with_thresholds(CurateParams(), new)
    recomputed = {r["doc_id"]: r for r in document_rows(len(rows) - 1, params)}
    to_kept = sorted(d for d, r in recomputed.items() if r["kept"] and not _kept(rows, d))
    to_dropped = sorted(d for d, r in recomputed.items() if not r["kept"] and _kept(rows, d))
    assert report["flips"] == {"to_kept": to_kept, "to_dropped": to_dropped}
    assert to_kept and to_dropped, "the fixture should flip documents both ways"
    assert sum(r["to_kept"] for r in report["by"]["crawl"]) == len(to_kept)
    assert {r["value"] for r in report["by"]["domain_class"]} <= set(DOMAIN_CLASSES)  # curated's label
    assert sum(r["to_kept"] for r in report["by"]["domain_class"]) == len(to_kept)
    changed = {c[0]: c[2] for c in report["changed"]}
    assert changed == {d: r["decision"] for d, r in recomputed.items() if r["decision"] != _decision(rows, d)}
    assert "f" * 32 not in changed  # the HTTP error row keeps its decision
    assert report["partitions"] == ["CRAWL-A/seg-1", "CRAWL-B/seg-1"]


def _kept(rows, doc_id):
    return next(r["kept"] for r in rows if r["doc_id"] == doc_id)


def _decision(rows, doc_id):
    return next(r["decision"] for r in rows if r["doc_id"] == doc_id)


def test_funnel_drift_names_the_reasons_that_moved(lakehouse):
    write_documents(lakehouse)
    none = proposals.funnel_drift(lakehouse, 1.0)
    assert none["drift"] == [] and (none["previous_crawl"], none["crawl"]) == ("CRAWL-A", "CRAWL-B")
    found = proposals.funnel_drift(lakehouse, 0.0)
    assert found["drift"] and all(abs(d["share"] - d["previous_share"]) > 0 for d in found["drift"])


def test_a_perplexity_percentile_change_flips_nothing_but_rewrites_every_partition(lakehouse):
    write_documents(lakehouse)
    base = policies.active(lakehouse, "thresholds")
    report = proposals.dry_run(
        lakehouse, "thresholds", base.policy, proposals.set_threshold(base.policy, "ppl_head_pct", 20.0)
    )
    assert report["flips"] == {"to_kept": [], "to_dropped": []} and report["changed"] == []
    assert report["partitions"] == ["CRAWL-A/seg-1", "CRAWL-B/seg-1"]
    assert report["ppl_buckets"] == "recomputed on apply, not predicted"


def test_the_dry_run_of_an_empty_lakehouse_is_empty(lakehouse):
    base = policies.active(lakehouse, "thresholds")
    report = proposals.dry_run(
        lakehouse, "thresholds", base.policy, proposals.set_threshold(base.policy, "gopher_min_words", 1)
    )
    assert (report["documents"], report["partitions"], report["changed"]) == (0, [], [])


def _curated_under_two_versions(lakehouse) -> list[dict]:
    """Two curated segments written under thresholds/0 (CRAWL-A) and thresholds/1 (CRAWL-B); their rows."""
    from iceberg_catalog.schemas import CURATED_DOCUMENTS

    rows = document_rows(6)
    for segment, version in (("CRAWL-A/seg-1", "thresholds/0"), ("CRAWL-B/seg-1", "thresholds/1")):
        crawl, seg = segment.split("/")
        writer = lakehouse.writer(CURATED_DOCUMENTS, {"crawl": crawl, "segment": seg})
        part = [r for r in rows if (r["crawl"], r["segment"]) == (crawl, seg)]
        writer.write(pa.Table.from_pylist(part, schema=CURATED_DOCUMENTS.arrow_schema))
        writer.commit(Provenance("curated/documents", segment, "r", "c", "h", {}, {"policy-version": version}))
    return rows


def test_a_snapshot_names_the_versions_of_what_it_read_joined_with_its_own(lakehouse):
    """commit_partition stamps the writer's own version and those of the upstream partitions it read: the
    matching partition when the upstream has one (a tokenized segment reads its curated segment), every
    partition otherwise (a whole-table read); a kind the writer names itself replaces the inherited one."""
    from iceberg_catalog.commit import join_policy_versions
    from iceberg_catalog.schemas import CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES

    _curated_under_two_versions(lakehouse)
    pins = lakehouse.snapshot_ids([CURATED_DOCUMENTS])

    def written_under(partition_key: str | None, own: dict) -> str:
        writer = lakehouse.writer(CURATED_EXACT_DUPLICATES, {"crawl": "CRAWL-A"})
        writer.commit(Provenance("curated/exact_duplicates", partition_key, "r", "c", "h", pins, own))
        snap = lakehouse.table(CURATED_EXACT_DUPLICATES).current_snapshot()
        return snap.summary.additional_properties.get("tokenlake.policy-version", "")

    assert written_under("gpt2|CRAWL-B/seg-1", {}) == "thresholds/1"  # its own segment only
    assert written_under(None, {}) == "thresholds/0,thresholds/1"  # read every segment
    assert written_under(None, {"policy-version": "mixture/2"}) == "mixture/2,thresholds/0,thresholds/1"
    assert written_under(None, {"policy-version": "thresholds/3"}) == "thresholds/3"  # it decided itself
    assert join_policy_versions("", []) == "" and join_policy_versions(None, ["b/1", "a/2"]) == "a/2,b/1"


def test_a_deletion_keeps_the_versions_of_the_history_it_expires(lakehouse):
    """Propagating a deletion expires the snapshots that wrote the partitions; the deletion snapshot carries the
    versions they named, so provenance and downstream writes still see them."""
    from assets.governance import propagate
    from assets.governance.requests import DeletionRequest, record
    from iceberg_catalog.schemas import CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES

    rows = _curated_under_two_versions(lakehouse)
    victim = next(r for r in rows if r["crawl"] == "CRAWL-B")
    rid = record(lakehouse, DeletionRequest("doc_id", victim["doc_id"], "takedown", "legal"), PROV)
    target = propagate.ErasureTarget("curated/documents", CURATED_DOCUMENTS, ("doc_id", "record_id", "deletion_key"))
    report = propagate.propagate(lakehouse, rid, [target], PROV)
    assert report["erased"] and report["tables"][CURATED_DOCUMENTS.identifier]["snapshots_expired"] >= 2
    assert policies.decided_by(lakehouse, "CRAWL-B", "seg-1")["policy_version"] == "thresholds/1"
    assert policies.decided_by(lakehouse, "CRAWL-A", "seg-1")["policy_version"] == "thresholds/0"
    writer = lakehouse.writer(CURATED_EXACT_DUPLICATES, {"crawl": "CRAWL-A"})
    pins = lakehouse.snapshot_ids([CURATED_DOCUMENTS])
    writer.commit(Provenance("curated/exact_duplicates", None, "r", "c", "h", pins, {}))
    snap = lakehouse.table(CURATED_EXACT_DUPLICATES).current_snapshot()
    assert snap.summary.additional_properties["tokenlake.policy-version"] == "thresholds/0,thresholds/1"
