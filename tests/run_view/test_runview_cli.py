"""`tokenlake runview list|show|approve|reject`: the CLI goes through the same publish_run_view job."""

from __future__ import annotations

import dagster as dg

from assets.run_view import store
from orchestration.cli import main
from orchestration.instance import prepare_dagster_home
from tests.run_view import builders
from tests.run_view.test_gate import candidate_metadata, materialize_candidate


def test_cli_lists_shows_and_approves_with_an_explicit_reviewer(lakehouse, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    prepare_dagster_home()
    builders.write_documents(lakehouse, n_docs=20)
    builders.screen(lakehouse)
    with dg.DagsterInstance.get() as instance:
        md = candidate_metadata(materialize_candidate(instance, name="cli"))
    rv_id, sha = md["run_view_id"], md["manifest_sha256"]

    assert main(["runview", "list"]) == 0
    out = capsys.readouterr().out
    assert rv_id in out and "candidate" in out
    assert main(["runview", "show", rv_id]) == 0
    out = capsys.readouterr().out
    assert "requested" in out and sha in out and '"seq_len": 64' in out
    assert main(["runview", "show", "nope-123"]) == 2

    # a stale hash is refused with the reason; nothing changes
    assert main(["runview", "approve", rv_id, "--sha256", "f" * 64, "--reviewer", "dana"]) == 1
    assert "StaleManifest" in capsys.readouterr().err
    assert store.load_manifest(lakehouse, rv_id)["status"] == "candidate"

    assert main(["runview", "approve", rv_id, "--sha256", sha, "--reviewer", "dana"]) == 0
    assert "published by dana" in capsys.readouterr().out
    row = store.load_manifest(lakehouse, rv_id)
    assert (row["status"], row["reviewer"]) == ("published", "dana")
    assert main(["runview", "reject", rv_id, "--sha256", sha, "--reviewer", "eve", "--comment", "late"]) == 1
    assert "AlreadyDecided" in capsys.readouterr().err
