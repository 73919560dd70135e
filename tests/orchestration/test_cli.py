"""The `tokenlake` CLI over a real catalog."""

from __future__ import annotations

import json
import re

import pytest

from orchestration.cli import main

from conftest import SAMPLE_CRAWL, SAMPLE_KEYS, materialize_segments


def test_tables_and_snapshots(tokenlake_home, instance, capsys):
    materialize_segments(instance, SAMPLE_CRAWL, SAMPLE_KEYS[1:2])
    assert main(["tables"]) == 0
    out = capsys.readouterr().out
    assert "raw.warc_records" in out and "quarantine.matches" in out
    assert main(["snapshots", "raw.warc_records", "-n", "1"]) == 0
    out = capsys.readouterr().out
    assert '"partition-key": "CC-MAIN-2024-22/1715971057216.39"' in out and '"asset-key": "raw/warc_records"' in out
    assert main(["snapshots", "raw.nope"]) == 2
    assert "unknown table 'raw.nope'" in capsys.readouterr().err


def test_digest_prints_every_table_and_the_run_view_samples_digest(lakehouse, capsys):
    from iceberg_catalog import TABLES
    from iceberg_catalog.digest import lakehouse_digest
    from tests.run_view import builders

    builders.write_documents(lakehouse, n_docs=12)
    builders.screen(lakehouse)
    view = builders.candidate(lakehouse, name="digest")
    assert main(["digest", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.endswith("}\n")  # exactly one JSON object on one line
    digest = json.loads(out)
    assert digest == lakehouse_digest(lakehouse) and set(TABLES) < set(digest)
    assert digest["run_view.samples_digest"] == [view.manifest["samples"]["sha256"]]
    assert digest["tokenized.documents"]["rows"] == 12 and digest["raw.warc_records"] == {"rows": 0, "sha256": "empty"}
    assert main(["digest"]) == 0
    out = capsys.readouterr().out
    assert digest["tokenized.documents"]["sha256"] in out and view.manifest["samples"]["sha256"] in out


# ---- a refusal is one sentence: the reason, the bad value, the run id (Dagster's traceback only with --verbose) --

RUN_ID = re.compile(r"\(run ([0-9a-f-]{36}); its full log: tokenlake log \1\)")


@pytest.fixture
def dagster_home(tokenlake_home, tmp_path, monkeypatch):
    """The local instance the commands launch their jobs on (monkeypatch restores the DAGSTER_HOME they set)."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    return tmp_path / "dagster"


def refused(capsys, argv: list[str], *named: str) -> str:
    """Run `tokenlake argv`, expecting a refusal: exit 1, at most 3 lines naming `named` and the run id, no
    traceback; returns the run id."""
    assert main(argv) == 1
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text and "Stack Trace" not in text and "dagster._core" not in text, text
    assert len(text.strip().splitlines()) <= 3, text
    assert all(value in text for value in named), text
    return RUN_ID.search(text).group(1)


def test_a_refused_run_view_decision_is_one_line_and_its_log_is_one_command_away(dagster_home, capsys):
    argv = ["runview", "approve", "rv-nope-000000000000", "--sha256", "abc", "--reviewer", "bob"]
    run_id = refused(capsys, argv, "UnknownRunView: unknown run view 'rv-nope-000000000000'")
    assert main(["log", run_id]) == 0
    log = capsys.readouterr().out
    assert "STEP_FAILURE" in log and "Stack Trace" in log and "UnknownRunView" in log
    assert main(["log", "0" * 8]) == 2 and "no run '00000000'" in capsys.readouterr().err

    assert main(["--verbose", *argv]) == 1
    captured = capsys.readouterr()
    assert "Stack Trace" in captured.err and 'File "' in captured.err and RUN_ID.search(captured.err)


def test_a_refused_proposal_review_and_proposal_are_one_line(dagster_home, lakehouse, tokenlake_home, capsys):
    from assets.governance import proposals
    from tests.governance.policy_builders import write_documents

    write_documents(lakehouse)
    (tokenlake_home / "governance.yaml").write_text("reviewers: [alice]\n")
    assert main(["propose", "threshold", "c4_min_sentences", "1", "--by", "carol"]) == 0
    (row,) = proposals.list_proposals(lakehouse)
    capsys.readouterr()
    wrong = "0" * 64
    argv = ["proposals", "approve", row["proposal_id"], "--sha256", wrong, "--reviewer", "alice"]
    refused(capsys, argv, "StaleProposalHash", wrong, row["proposal_id"])
    refused(capsys, ["propose", "threshold", "quality.nope", "3", "--by", "carol"], "unknown threshold 'quality.nope'")
    assert main(["--verbose", *argv]) == 1
    assert "Stack Trace" in capsys.readouterr().err
    assert proposals.load(lakehouse, row["proposal_id"])["status"] == "proposed"
