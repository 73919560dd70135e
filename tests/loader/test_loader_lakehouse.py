"""The loader reads through the one lakehouse handle and the one run view contract, without Dagster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from iceberg_catalog import CatalogConfig
from iceberg_catalog.readonly import read_only_catalog
from iceberg_catalog.run_view_contract import manifest_sha256, run_view_id, samples_digest
from loader import in_memory_view, open_run_view
from loader.catalog import as_lakehouse
from tests.loader import views
from tests.loader.views import without_layout_property

REPO = Path(__file__).resolve().parents[2]


def test_loader_imports_without_dagster():
    code = "import sys, loader\nassert 'dagster' not in sys.modules, sorted(m for m in sys.modules if 'dagster' in m)"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


def first_batch_imports(env_home: Path) -> list[str]:
    """The heavy modules a fresh process imported by its first batch from the configured (embedded) catalog."""
    code = (
        "import sys, loader\n"
        f"view = loader.open_run_view({views.lakehouse()['a']!r})\n"
        "batch = next(iter(loader.RunViewLoader(view, 24, seq_len=64)))\n"
        "assert batch['input_ids'].shape == (24, 64), batch['input_ids'].shape\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TOKENLAKE_CATALOG"}
    env["TOKENLAKE_HOME"] = str(env_home)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, timeout=120, capture_output=True)
    return json.loads(out.stdout.decode().strip().splitlines()[-1].replace("'", '"'))


HEAVY = ("pyiceberg", "pydantic", "pandas", "sqlalchemy", "pyarrow.dataset", "yaml", "dagster")


def test_a_training_process_reaches_its_first_batch_without_pyiceberg_pandas_or_sqlalchemy():
    """Opening from the configured (embedded) catalog reads the tables' metadata files itself
    (iceberg_catalog.metadata_files): pyiceberg and pydantic were ~0.35 s of a fresh process's ~2 s to its first
    batch, pandas and SQLAlchemy ~0.5 s before that (bench/loader.py, first_batch_heavy_imports)."""
    assert first_batch_imports(views.lakehouse()["home"]) == []


def test_a_view_the_metadata_reader_cannot_open_opens_through_pyiceberg(monkeypatch):
    """A view published without its layout is located by a pyiceberg scan: the configured catalog falls back to it
    (same view), and the fresh process then imports pyiceberg (the check above can fail)."""
    rv = views.lakehouse()["a"]
    with without_layout_property(rv):
        assert "pyiceberg" in first_batch_imports(views.lakehouse()["home"])
        monkeypatch.setenv("TOKENLAKE_HOME", str(views.lakehouse()["home"]))
        monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
        located = open_run_view(rv)
    assert located.source.group_sha256 is None  # located, not read from the published layout
    published = views.view("a")
    assert located.source.files == published.source.files
    assert np.array_equal(located.block_ids, published.block_ids)


def test_a_lakehouse_a_bare_catalog_and_the_configured_default_open_the_same_view(monkeypatch):
    by_handle = views.view("a")
    by_catalog = open_run_view(views.lakehouse()["a"], catalog=views.catalog())
    monkeypatch.setenv("TOKENLAKE_HOME", str(views.lakehouse()["home"]))
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    by_default = open_run_view(views.lakehouse()["a"])
    by_reader = open_run_view(views.lakehouse()["a"], catalog=read_only_catalog(CatalogConfig.resolve()))
    for v in (by_catalog, by_default, by_reader):  # the last two read the metadata files without pyiceberg
        assert (v.run_view_id, v.manifest_sha256) == (by_handle.run_view_id, by_handle.manifest_sha256)
        assert v.samples.equals(by_handle.samples) and np.array_equal(v.block_ids, by_handle.block_ids)
        assert v.source.files == by_handle.source.files and v.source.group_sha256 == by_handle.source.group_sha256
    # a wrapped catalog locks on the same key as the handle of the same configuration
    assert as_lakehouse(views.catalog()).lock_key == views.handle().lock_key
    handle = views.handle()
    assert as_lakehouse(handle) is handle


def test_an_in_memory_view_follows_the_contract():
    view = in_memory_view(views.gpt2_docs()[:5], seq_len=64, eos_id=50256)
    assert view.manifest.samples_sha256 == samples_digest(view.samples)
    assert view.manifest_sha256 == manifest_sha256(view.manifest.to_dict()) == view.manifest.sha256
    assert view.run_view_id == run_view_id("memory", view.manifest_sha256)


def test_a_node_local_layout_cache_gives_the_same_view_and_survives_corruption(tmp_path, monkeypatch):
    from loader import open_run_view
    from tests.loader import views
    from tests.loader.views import without_layout_property

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
