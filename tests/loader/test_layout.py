"""A view published with its layout (assets/run_view/layout.py): the loader takes each sample's (file, row group,
row) from it instead of reading every doc_id column, and verifies a row group with one sha256 against its
published digest; a row group that does not match is checked document by document, naming the bad document.
Views without a layout (published before, or its blob altered) open the way they always did."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import loader
from iceberg_catalog import run_view_contract as contract
from iceberg_catalog.schemas import RUN_VIEW_SAMPLES
from loader import RunViewLoader, open_run_view
from tests.loader import views
from tests.loader.views import GLOBAL_BATCH, run, same_batch, without_layout_property


def test_the_published_layout_equals_the_located_one_and_old_views_still_open():
    rv = views.lakehouse()["a"]
    published = open_run_view(rv, catalog=views.handle())
    src = published.source
    assert src.group_sha256, "publication wrote no row-group digests"
    assert set(src.group_sha256) == set(np.unique(src.key).tolist())  # every row group the view reads
    with without_layout_property(rv):
        located = open_run_view(rv, catalog=views.handle())
    assert located.source.group_sha256 is None
    assert located.source.files == src.files
    for name in ("file_index", "row_group", "row"):
        assert np.array_equal(getattr(located.source, name), getattr(src, name)), name
    assert np.array_equal(located.block_ids, published.block_ids)
    a, b = run(RunViewLoader(published, GLOBAL_BATCH), 14), run(RunViewLoader(located, GLOBAL_BATCH), 14)
    assert len(a) == len(b) and all(same_batch(x, y) for x, y in zip(a, b, strict=True))


def test_an_altered_layout_blob_is_ignored_and_the_view_located():
    rv = views.lakehouse()["a"]
    pointer = views.handle().table(RUN_VIEW_SAMPLES).properties[contract.layout_property(rv)]
    sha, path = pointer.split(" ", 1)
    wrong = "0" * 64 if sha != "0" * 64 else "1" * 64
    with without_layout_property(rv, f"{wrong} {path}"):
        view = open_run_view(rv, catalog=views.handle())
    assert view.source.group_sha256 is None
    assert np.array_equal(view.block_ids, views.view("a").block_ids)


def test_rows_are_verified_by_their_row_group_digest():
    view = open_run_view(views.lakehouse()["a"], catalog=views.handle())
    data = RunViewLoader(view, GLOBAL_BATCH, prefetch=0)
    batches = run(data, 14)
    checks = data.plan.view.source.group_checks  # the loader's copy of the source did the reading
    assert checks["verified"] >= len(view.source.group_sha256) and checks["mismatched"] == 0
    assert all(same_batch(x, y) for x, y in zip(batches, run(RunViewLoader(views.view("a"), GLOBAL_BATCH), 14)))


def _bundle_with_token_file(tmp_path, alter: bool):
    """A copy of the exported bundle whose first token file is a copy (one token of its 4th document changed when
    `alter`), the layout naming the copy with the digests published for the original."""
    bundle = tmp_path / "bundle"
    shutil.copytree(views.bundle(), bundle)
    meta = json.loads((bundle / "run_view.json").read_text())
    layout = contract.ViewLayout.decode((bundle / "layout.bin").read_bytes())
    original = meta["token_files"][0].removeprefix("file://")
    table = pq.read_table(original)
    victim = table.column("doc_id")[3].as_py()
    if alter:
        tokens = table.column("tokens").to_pylist()
        tokens[3] = bytes([tokens[3][0] ^ 1]) + tokens[3][1:]
        table = table.set_column(table.schema.get_field_index("tokens"), "tokens", pa.array(tokens, pa.binary()))
    copy_path = tmp_path / "tokens-copy.parquet"
    pq.write_table(table, copy_path, row_group_size=pq.ParquetFile(original).metadata.row_group(0).num_rows)
    files = [str(copy_path), *meta["token_files"][1:]]
    layout.files = tuple(files)
    blob = layout.encode()
    (bundle / "layout.bin").write_bytes(blob)
    meta.update(token_files=files, layout_sha256=hashlib.sha256(blob).hexdigest())
    (bundle / "run_view.json").write_text(json.dumps(meta))
    return bundle, victim


def test_a_bundle_carries_the_row_group_digests(tmp_path):
    bundle, _ = _bundle_with_token_file(tmp_path, alter=False)
    view = open_run_view(bundle=bundle)
    assert view.source.group_sha256 == views.view("a").source.group_sha256
    data = RunViewLoader(view, GLOBAL_BATCH, prefetch=0)
    batches = run(data, 14)
    checks = data.plan.view.source.group_checks
    assert checks["mismatched"] == 0 and checks["verified"] > 0
    assert all(same_batch(x, y) for x, y in zip(batches, run(RunViewLoader(views.view("a"), GLOBAL_BATCH), 14)))


def test_an_altered_byte_in_a_row_group_is_caught_and_names_the_document(tmp_path):
    bundle, victim = _bundle_with_token_file(tmp_path, alter=True)
    view = open_run_view(bundle=bundle)
    assert view.source.group_sha256  # the digests are in use: the row group fails its digest first
    data = RunViewLoader(view, GLOBAL_BATCH, prefetch=0)
    with pytest.raises(loader.ChecksumMismatch, match=victim) as e:
        run(data, 14)
    assert e.value.doc_id == victim and view.run_view_id in str(e.value)
    assert data.plan.view.source.group_checks["mismatched"] >= 1


def test_a_layout_blob_round_trips_and_refuses_a_truncated_one():
    layout = contract.ViewLayout.decode(views.bundle().joinpath("layout.bin").read_bytes())
    again = contract.ViewLayout.decode(layout.encode())
    assert again.files == layout.files and again.group_digests() == layout.group_digests()
    with pytest.raises(ValueError, match="layout body"):
        contract.ViewLayout.decode(layout.encode()[:-1])


def test_a_window_stream_is_the_documents_back_to_back_in_the_order_asked():
    """read_stream joins the documents of several row groups, in any order and with repeats, verified; an empty
    read is empty. What every batch's tokens are sliced from."""
    src = open_run_view(views.lakehouse()["a"], catalog=views.handle()).source
    keys = np.unique(src.key)
    assert len(keys) >= 3
    samples = np.flatnonzero(np.isin(src.key, keys[:3]))
    order = np.random.default_rng(3).permutation(np.concatenate([samples, samples[:5]]))
    expect = src.read(order.tolist())
    got = src.read_stream(order)
    assert got.dtype == src.dtype
    assert np.array_equal(got, np.concatenate([expect[int(s)] for s in order]))
    one = np.flatnonzero(src.key == keys[1])[::-1]  # one row group, reversed
    assert np.array_equal(src.read_stream(one), np.concatenate([src.read(one.tolist())[int(s)] for s in one]))
    assert len(src.read_stream(np.zeros(0, np.int64))) == 0
