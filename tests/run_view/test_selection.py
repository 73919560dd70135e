"""The candidate built as tasks (assets/run_view/selection.py): the same samples, digest and manifest as the
one-process build (recorded at 5180909, before the change, and the one-process path still used for split views),
whatever the key ranges, the task order or the executor."""

from __future__ import annotations

import hashlib
import random

import pytest

from assets.run_view import selection, store
from assets.run_view.mixture import Component, MixtureError
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.run_view_contract import canonical_json
from iceberg_catalog.schemas import RUN_VIEW_SAMPLES
from tests.run_view import generated

MIX = generated.MIXTURE
CONFIGS = {
    "all": {"components": (Component("all", 1.0),)},
    "mix": {"components": MIX},
    "budget": {"components": MIX, "token_budget": 1_500_000},  # code: two full passes and a partial third
    "seed7": {"components": MIX, "seed": 7, "token_budget": 900_000},
}
# (samples digest, sha256 of the manifest without its `inputs` (snapshot ids differ per catalog), samples) of the
# generated lakehouse (6,000 documents, 5 segments), built by store.build_candidate at 5180909
RECORDED = {
    "all": ("61ec4c14b4a4a7e1265e56511fd3b8c8badb27d8c8a58cb73283ddc522aaa2fe", "7a5eca2ca8d9019d", 5285),
    "mix": ("1b598ba498edf50883d839fd3c600b4f3ad3d0f7911c5c6fa6f496c994f48c08", "36a765ae5d4c614d", 3426),
    "budget": ("bb81a725083cd543b0299e836ad1ca1c0f0956ae8a263a87c1d8bf376fada357", "ef99d758ccb4808f", 2481),
    "seed7": ("d6d690bf75c469dc78aeb8cef676207d47fd3cfee199512c798ea674fd4d1b55", "a12400f89eba002e", 1530),
}
PROVENANCE = Provenance("run_view/candidate", None, "rec", "test", "test")


@pytest.fixture(scope="module")
def gen_lakehouse(tmp_path_factory) -> Lakehouse:
    home = tmp_path_factory.mktemp("gen") / "tokenlake"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENLAKE_HOME", str(home))
        mp.delenv("TOKENLAKE_CATALOG", raising=False)
        lakehouse = Lakehouse()
        generated.write_lakehouse(lakehouse, 6000, 5)
        yield lakehouse


def spec(config: str, name: str = "gen") -> store.RunViewSpec:
    return store.RunViewSpec(name=name, tokenizer=generated.TOKENIZER, **CONFIGS[config])


def sans_inputs(manifest: dict) -> str:
    return hashlib.sha256(canonical_json({k: v for k, v in manifest.items() if k != "inputs"}).encode()).hexdigest()


def shuffled(fn, tasks):
    """Tasks run in a shuffled order, results returned in another."""
    order = list(tasks)
    random.Random(len(order)).shuffle(order)
    out = [fn(t) for t in order]
    random.Random(len(order) + 1).shuffle(out)
    return out


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_same_view_as_before(gen_lakehouse, config):
    result = store.build_candidate(gen_lakehouse, spec(config), PROVENANCE, samples_per_task=500)
    digest, manifest_sha, n = RECORDED[config]
    assert result.manifest["samples"]["sha256"] == digest
    assert sans_inputs(result.manifest).startswith(manifest_sha)
    assert result.manifest["samples"]["n_samples"] == n
    assert store.samples_digest(store.read_samples(gen_lakehouse, result.run_view_id)) == digest


@pytest.mark.parametrize("config", ["mix", "budget"])
def test_same_as_one_process_build_for_any_cut_and_order(gen_lakehouse, config):
    pinned = gen_lakehouse.snapshot_ids(store.INPUT_TABLES)
    oracle = store.build_in_one_process(gen_lakehouse, spec(config, "oracle"), PROVENANCE, pinned)
    stored = [store.read_samples(gen_lakehouse, oracle.run_view_id).drop_columns(["run_view_id"])]
    for k, (per_task, executor) in enumerate([(10**9, selection.in_process), (997, shuffled), (101, shuffled)]):
        result = store.build_candidate(
            gen_lakehouse, spec(config, f"cut{k}"), PROVENANCE, pinned, executor=executor, samples_per_task=per_task
        )
        assert {**result.manifest, "name": "oracle"} == oracle.manifest
        table = store.read_samples(gen_lakehouse, result.run_view_id).drop_columns(["run_view_id"])
        stored.append(table)
    assert len(stored) == 4 and all(t.equals(stored[0]) for t in stored)


def test_existing_view_is_returned_and_scratch_removed(gen_lakehouse):
    first = store.build_candidate(gen_lakehouse, spec("all", "again"), PROVENANCE, samples_per_task=700)
    again = store.build_candidate(gen_lakehouse, spec("all", "again"), PROVENANCE, samples_per_task=300)
    assert (again.created, again.run_view_id) == (False, first.run_view_id)
    assert not list(scratch_files(gen_lakehouse))


def test_unrealisable_mixture_fails_and_leaves_no_scratch(gen_lakehouse):
    nothing = store.RunViewSpec(
        name="none", tokenizer=generated.TOKENIZER, components=(Component("xx", 1.0, {"language": ["xx"]}),)
    )
    with pytest.raises(MixtureError, match="matches no eligible document"):
        store.build_candidate(gen_lakehouse, nothing, PROVENANCE)
    assert not list(scratch_files(gen_lakehouse))


def scratch_files(lakehouse: Lakehouse):
    from pathlib import Path

    root = Path(lakehouse.table(RUN_VIEW_SAMPLES).location().removeprefix("file://")) / "data" / "scratch"
    return (p for p in root.rglob("*") if p.is_file()) if root.exists() else iter(())


def test_component_of_matches_component_matches(gen_lakehouse):
    """The vectorised first-match is `Component.matches`, including a missing confidence and a missing label."""
    import pyarrow as pa

    docs = pa.table(
        {
            "language": ["en", None, "de", "en"],
            "domain_class": ["code", "code", None, "news"],
            "domain_confidence": [0.3, 0.9, None, 0.29],
            **{c: ["x"] * 4 for c in ("ppl_bucket", "host", "crawl", "segment")},
        }
    )
    got = selection.component_of(docs, MIX[1:2] + MIX[0:1] + MIX[2:])
    want = [
        next((k for k, c in enumerate(MIX[1:2] + MIX[0:1] + MIX[2:]) if c.matches(d)), -1) for d in docs.to_pylist()
    ]
    assert got.tolist() == want == [0, 0, 2, 1]


def test_samples_digest_over_pieces():
    """The digest streamed over consecutive pieces (how `selection.digest` reads the ordered ranges) is the
    digest of the whole table and of its rows, a null spelled as the per-row path spells it."""
    import pyarrow as pa

    from iceberg_catalog.run_view_contract import samples_digest, update_samples_digest

    rows = [
        {"sample_index": i, "doc_id": f"d{i}", "repetition": i % 2, "n_tokens": 10 + i, "tokens_sha256": "ab"}
        for i in range(7)
    ]
    rows[5]["tokens_sha256"] = None
    table = pa.Table.from_pylist(rows)
    h = hashlib.sha256()
    for start in (0, 3, 6):
        update_samples_digest(h, table.slice(start, 3))
    assert h.hexdigest() == samples_digest(table) == samples_digest(rows)
