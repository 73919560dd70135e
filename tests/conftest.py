"""Shared fixtures: a real embedded Iceberg catalog and a real Dagster instance, both in temp dirs."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import dagster as dg
import pytest
from hypothesis import settings

# No per-example deadline: CI machines are shared and slow; properties are about results, not speed.
settings.register_profile("tokenlake", deadline=None)
settings.load_profile("tokenlake")

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CRAWL = REPO / "data" / "sample_crawl"
SAMPLE_KEYS = (
    "CC-MAIN-2020-34/1596439738015.38",
    "CC-MAIN-2024-22/1715971057216.39",
    "LEGACY-ARCHIVES/heritrix-2008",
    "LEGACY-ARCHIVES/rust-docs-2026",
    "LEGACY-ARCHIVES/wget-2024",
)


def skip_here_fail_in_ci(missing: str | None) -> None:
    """For a test that needs a browser or a server: when `missing` names what this machine lacks (and how to get
    it), skip the test, or fail it where TOKENLAKE_REQUIRE_SERVERS=1: CI installs them all, so a skip there would
    hide a test that never ran."""
    __tracebackhide__ = True  # pytest reports the skip or failure at the caller's line, not here
    if not missing:
        return
    if os.environ.get("TOKENLAKE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{missing} (TOKENLAKE_REQUIRE_SERVERS=1: this test must run, not skip)")
    pytest.skip(f"missing server or browser: {missing}")


@pytest.fixture(autouse=True)
def sigterm_ends_processes():
    """SIGTERM at its default around every test. Dagster's `capture_interrupts` (entered by each
    `dg.materialize`) leaves SIGTERM with SIGINT's handler when it exits, and a background shell job starts with
    SIGINT ignored: from the first Dagster run on, SIGTERM was ignored in this process and in every process a
    later test started (an ignored signal survives fork and exec), so `Pool.terminate()` waited forever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(scope="session", autouse=True)
def no_working_directory_home(tmp_path_factory) -> None:
    """A test without the `tokenlake_home` fixture reads and writes an empty session TOKENLAKE_HOME, never the
    default `.tokenlake` of the working directory (where a demo run may have left a model of another format)."""
    os.environ["TOKENLAKE_HOME"] = str(tmp_path_factory.mktemp("session-home") / "tokenlake")


@pytest.fixture(scope="session", autouse=True)
def shared_model_cache(tmp_path_factory) -> None:
    """The default domain model is trained once per session (~20 s) and loaded by every process a test starts
    (TOKENLAKE_MODEL_CACHE, inherited by subprocesses); each TOKENLAKE_HOME still starts empty."""
    from assets.curated.domain import MODEL_CACHE_ENV

    os.environ.setdefault(MODEL_CACHE_ENV, str(tmp_path_factory.mktemp("model-cache")))


@pytest.fixture
def tokenlake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TOKENLAKE_HOME: the embedded catalog and warehouse live under it."""
    home = tmp_path / "tokenlake"
    monkeypatch.setenv("TOKENLAKE_HOME", str(home))
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    return home


@pytest.fixture
def lakehouse(tokenlake_home: Path):
    """The embedded lakehouse under a fresh TOKENLAKE_HOME (real SQLite catalog, real file warehouse)."""
    from iceberg_catalog import Lakehouse

    return Lakehouse()


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def crawl_root(tmp_path: Path):
    """Build a crawl directory: `crawl_root({"CRAWL/SEG": {"name.warc.gz": bytes | Path}})` -> root path."""

    def build(layout: dict[str, dict[str, bytes | Path]]) -> Path:
        root = tmp_path / "crawl"
        for key, files in layout.items():
            crawl, segment = key.split("/")
            warc_dir = root / "crawl-data" / crawl / "segments" / segment / "warc"
            warc_dir.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                if isinstance(content, Path):
                    shutil.copyfile(content, warc_dir / name)
                else:
                    (warc_dir / name).write_bytes(content)
        return root

    return build


def materialize_segments(
    instance: dg.DagsterInstance, root: Path, keys, run_config=None, selection: str = "raw", lm_path: str = ""
) -> list:
    """Add `keys` as dynamic partitions and materialise `selection` (an asset group) for each, through real
    Dagster into the real catalog under TOKENLAKE_HOME."""
    from orchestration.definitions import defs
    from resources import IcebergCatalogResource, LanguageModelResource, LocalCrawlSource

    instance.add_dynamic_partitions("crawl_segments", list(keys))
    resources = {
        **defs.resources,
        "catalog": IcebergCatalogResource(),
        "crawl_source": LocalCrawlSource(root=str(root)),
        "lm": LanguageModelResource(model_path=lm_path),
    }
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
    sel = (
        dg.AssetSelection.groups("raw")
        if selection == "raw"
        else dg.AssetSelection.assets(dg.AssetKey(selection.split("/"))).required_multi_asset_neighbors()
    )
    results = []
    for key in keys:
        res = dg.materialize(
            assets, partition_key=key, instance=instance, resources=resources, run_config=run_config, selection=sel
        )
        assert res.success, key
        results.append(res)
    return results


def materialize_assets(instance: dg.DagsterInstance, *keys: str, lm_path: str = "", run_config=None):
    """Materialise unpartitioned assets (and their checks) by key path, e.g. "curated/exact_duplicates"."""
    from orchestration.definitions import defs
    from resources import IcebergCatalogResource, LanguageModelResource, LocalCrawlSource

    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)] + list(defs.asset_checks or [])
    resources = {
        **defs.resources,
        "catalog": IcebergCatalogResource(),
        "lm": LanguageModelResource(model_path=lm_path),
        "crawl_source": LocalCrawlSource(root=str(SAMPLE_CRAWL)),
    }
    res = dg.materialize(
        assets,
        instance=instance,
        resources=resources,
        run_config=run_config,
        selection=dg.AssetSelection.assets(*(dg.AssetKey(k.split("/")) for k in keys)),
    )
    assert res.success, keys
    return res


@pytest.fixture(scope="session")
def reference_lm_file(tmp_path_factory) -> str:
    """The reference KenLM model, built once per test session from the repo's corpus."""
    from assets.curated.models import REFERENCE_CORPUS
    from assets.curated.ngram_lm import build_reference_lm

    out = tmp_path_factory.mktemp("lm") / "reference_lm.arpa"
    build_reference_lm(REFERENCE_CORPUS, out, order=3)
    return str(out)
