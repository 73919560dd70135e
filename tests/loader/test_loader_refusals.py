"""Must-show 4 and issue item 1: named errors for a state from another run view, seed, packing, tokenizer,
global batch size or state version; for candidate, rejected and superseded views; for corrupted tokens."""

from __future__ import annotations

import copy
import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import loader
from assets.run_view import store
from loader import RunViewLoader, open_run_view
from tests.loader import views
from tests.loader.views import GLOBAL_BATCH, run


@pytest.fixture(scope="module")
def saved():
    data = RunViewLoader(views.view("a"), GLOBAL_BATCH)
    run(data, 3)
    return data.state_dict()


def tampered(state: dict, **fingerprint) -> dict:
    out = copy.deepcopy(state)
    out["fingerprint"].update(fingerprint)
    return out


def test_the_saved_state_loads_into_the_same_configuration(saved):
    data = RunViewLoader(views.view("a"), GLOBAL_BATCH, rank=1, world_size=3, num_workers=1)
    data.load_state_dict(saved)
    assert data.global_step == 3


@pytest.mark.parametrize(
    ("make_loader", "error"),
    [
        (lambda: RunViewLoader(views.view("b"), GLOBAL_BATCH), loader.RunViewMismatch),
        (lambda: RunViewLoader(views.view("a"), GLOBAL_BATCH, seed=1), loader.SeedMismatch),
        (lambda: RunViewLoader(views.view("a"), GLOBAL_BATCH, seq_len=128), loader.PackingMismatch),
        (
            lambda: RunViewLoader(views.view("a"), GLOBAL_BATCH, cross_document_attention="allowed"),
            loader.PackingMismatch,
        ),
        (lambda: RunViewLoader(views.view("a"), 12), loader.GlobalBatchSizeMismatch),
    ],
)
def test_a_state_from_another_configuration_is_refused(saved, make_loader, error):
    with pytest.raises(error) as e:
        make_loader().load_state_dict(saved)
    assert isinstance(e.value, loader.StateMismatch)


@pytest.mark.parametrize(
    ("change", "error", "named"),
    [
        ({"tokenizer_id": "0" * 64}, loader.TokenizerMismatch, "0" * 64),
        ({"manifest_sha256": "f" * 64}, loader.ManifestMismatch, "f" * 64),
        ({"state_version": 99}, loader.StateVersionMismatch, "99"),
        ({"order": "block-window/0"}, loader.StateVersionMismatch, "block-window/0"),
    ],
)
def test_a_state_with_another_fingerprint_is_refused(saved, change, error, named):
    with pytest.raises(error, match=named):
        RunViewLoader(views.view("a"), GLOBAL_BATCH).load_state_dict(tampered(saved, **change))


def test_malformed_states_are_refused(saved):
    data = RunViewLoader(views.view("a"), GLOBAL_BATCH)
    for bad in ({}, {"format": "something else"}, {**saved, "global_step": "3"}, {**saved, "global_step": -1}):
        with pytest.raises(loader.MalformedState):
            data.load_state_dict(bad)
    with pytest.raises(loader.StateVersionMismatch):
        data.load_state_dict({**saved, "state_version": 2})


def test_world_size_not_dividing_the_global_batch_is_refused():
    with pytest.raises(loader.BadWorldSize, match="world size 5"):
        RunViewLoader(views.view("a"), GLOBAL_BATCH, rank=0, world_size=5)


def _provenance():
    from tests.run_view import builders

    return builders.provenance("run_view/manifests")


def test_candidate_rejected_and_superseded_views_are_refused():
    from tests.run_view import builders

    cat = views.handle()
    cand = builders.candidate(cat, name="loader-cand", seed=5, seq_len=views.SEQ_LEN)
    with pytest.raises(loader.RunViewNotPublished, match="candidate"):
        open_run_view(cand.run_view_id, catalog=cat)
    rej = builders.candidate(cat, name="loader-rej", seed=6, seq_len=views.SEQ_LEN)
    store.decide(cat, rej.run_view_id, rej.manifest_sha256, "reviewer", "reject", "no", {}, _provenance())
    with pytest.raises(loader.RunViewRejected):
        open_run_view(rej.run_view_id, catalog=cat)
    sup = builders.candidate(cat, name="loader-sup", seed=7, seq_len=views.SEQ_LEN)
    builders.publish(cat, sup)
    open_run_view(sup.run_view_id, catalog=cat)  # published: opens
    store.set_status(cat, sup.run_view_id, _provenance(), status="superseded", superseded_by_request="del-42")
    with pytest.raises(loader.RunViewSuperseded, match="del-42") as e:
        open_run_view(sup.run_view_id, catalog=cat)
    assert e.value.superseded_by_request == "del-42"
    with pytest.raises(loader.RunViewNotPublished):
        loader.export_run_view(cand.run_view_id, views.lakehouse()["home"] / "never", catalog=cat)
    with pytest.raises(loader.RunViewNotFound):
        open_run_view("no-such-view", catalog=cat)


def test_corrupted_token_bytes_raise_checksum_mismatch_naming_the_document(tmp_path):
    """A bundle whose token file had one token changed (same row groups, same recorded checksums)."""
    bundle = tmp_path / "bundle"
    shutil.copytree(views.bundle(), bundle)
    meta = json.loads((bundle / "run_view.json").read_text())
    victim_file = meta["token_files"][0].removeprefix("file://")
    table = pq.read_table(victim_file)
    tokens = table.column("tokens").to_pylist()
    victim = table.column("doc_id")[3].as_py()
    tokens[3] = bytes([tokens[3][0] ^ 1]) + tokens[3][1:]
    table = table.set_column(table.schema.get_field_index("tokens"), "tokens", pa.array(tokens, pa.binary()))
    copy_path = tmp_path / "corrupt.parquet"
    pq.write_table(table, copy_path, row_group_size=pq.ParquetFile(victim_file).metadata.row_group(0).num_rows)
    meta["token_files"][0] = str(copy_path)
    (bundle / "run_view.json").write_text(json.dumps(meta))
    view = open_run_view(bundle=bundle)
    with pytest.raises(loader.ChecksumMismatch, match=victim) as e:
        run(RunViewLoader(view, GLOBAL_BATCH))
    assert e.value.doc_id == victim


def test_in_memory_checksums_are_verified_too():
    docs = list(views.gpt2_docs(n=6))
    view = loader.in_memory_view(docs, seq_len=32, eos_id=50256)
    view.source.data[view.doc_ids[2]] = b"\x00\x00" + view.source.data[view.doc_ids[2]][2:]
    with pytest.raises(loader.ChecksumMismatch, match=view.doc_ids[2]):
        run(RunViewLoader(view, 4))
