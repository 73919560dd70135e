"""The loader reads through the one lakehouse handle and the one run view contract, without Dagster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from iceberg_catalog.run_view_contract import manifest_sha256, run_view_id, samples_digest
from loader import in_memory_view, open_run_view
from loader.view import as_lakehouse
from tests.loader import views

REPO = Path(__file__).resolve().parents[2]


def test_loader_imports_without_dagster():
    code = "import sys, loader\nassert 'dagster' not in sys.modules, sorted(m for m in sys.modules if 'dagster' in m)"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


def test_a_training_process_reaches_its_first_batch_without_pandas_or_sqlalchemy():
    """Opening from the configured (embedded) catalog and reading a batch needs neither: together they were
    ~0.5 s of a fresh process's ~2 s to its first batch (bench/loader.py, first_batch_heavy_imports)."""
    code = (
        "import sys, loader\n"
        f"view = loader.open_run_view({views.lakehouse()['a']!r})\n"
        "batch = next(iter(loader.RunViewLoader(view, 24, seq_len=64)))\n"
        "assert batch['input_ids'].shape == (24, 64), batch['input_ids'].shape\n"
        "print(sorted(m for m in ('pandas', 'sqlalchemy', 'pyarrow.dataset', 'dagster') if m in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TOKENLAKE_CATALOG"}
    env["TOKENLAKE_HOME"] = str(views.lakehouse()["home"])
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, timeout=120, capture_output=True)
    assert out.stdout.decode().strip().splitlines()[-1] == "[]"


def test_a_lakehouse_a_bare_catalog_and_the_configured_default_open_the_same_view(monkeypatch):
    by_handle = views.view("a")
    by_catalog = open_run_view(views.lakehouse()["a"], catalog=views.catalog())
    monkeypatch.setenv("TOKENLAKE_HOME", str(views.lakehouse()["home"]))
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    by_default = open_run_view(views.lakehouse()["a"])
    for v in (by_catalog, by_default):
        assert (v.run_view_id, v.manifest_sha256) == (by_handle.run_view_id, by_handle.manifest_sha256)
        assert v.samples.equals(by_handle.samples) and np.array_equal(v.block_ids, by_handle.block_ids)
    # a wrapped catalog locks on the same key as the handle of the same configuration
    assert as_lakehouse(views.catalog()).lock_key == views.handle().lock_key
    handle = views.handle()
    assert as_lakehouse(handle) is handle


def test_an_in_memory_view_follows_the_contract():
    view = in_memory_view(views.gpt2_docs()[:5], seq_len=64, eos_id=50256)
    assert view.manifest["samples"]["sha256"] == samples_digest(view.samples)
    assert view.manifest_sha256 == manifest_sha256(view.manifest)
    assert view.run_view_id == run_view_id("memory", view.manifest_sha256)


def test_a_node_local_layout_cache_gives_the_same_view_and_survives_corruption(tmp_path, monkeypatch):
    from loader import open_run_view
    from tests.loader import views
    from tests.loader.test_layout import without_layout_property

    monkeypatch.setenv("TOKENLAKE_LAYOUT_CACHE", str(tmp_path))
    with without_layout_property(views.lakehouse()["a"]):  # a view published without a layout: located
        first = open_run_view(views.lakehouse()["a"], catalog=views.handle())
        (entry,) = tmp_path.glob("layout-*.npy")
        again = open_run_view(views.lakehouse()["a"], catalog=views.handle())
        assert again.block_ids.tolist() == first.block_ids.tolist() == views.view("a").block_ids.tolist()
        assert again.source.row.tolist() == first.source.row.tolist()
        entry.write_bytes(entry.read_bytes()[:-4] + b"\x00\x00\x00\x07")  # altered: ignored, located again
        third = open_run_view(views.lakehouse()["a"], catalog=views.handle())
        assert third.source.row.tolist() == first.source.row.tolist() and entry.is_file()


def test_the_arrow_samples_digest_equals_the_per_row_one():
    """The loader checks the samples digest of a view with Arrow (one hash over all lines): the same digest as
    the per-row definition, for a whole table, a slice, and (per-row fallback) a table with a null."""
    view = open_run_view(views.lakehouse()["a"], catalog=views.catalog())
    for table in (view.samples, view.samples.slice(3, 7)):
        assert samples_digest(table) == samples_digest(table.to_pylist())
    with_null = view.samples.set_column(
        1, "doc_id", pa.array([None, *view.samples.column("doc_id").to_pylist()[1:]], pa.large_string())
    )
    assert samples_digest(with_null) == samples_digest(with_null.to_pylist())
    assert samples_digest(with_null) != samples_digest(view.samples)
