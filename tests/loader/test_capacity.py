"""`tokenlake capacity`: the demand formula with the view's measured bytes per token, next to a real soak."""

from __future__ import annotations

import json

import pytest

from orchestration.cli import main
from tests.loader import views


@pytest.fixture()
def home(monkeypatch):
    monkeypatch.setenv("TOKENLAKE_HOME", str(views.lakehouse()["home"]))
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)


def test_capacity_prints_demand_from_measured_bytes_per_token_and_an_achieved_rate(home, capsys):
    rv = views.lakehouse()["a"]
    code = main(["capacity", "--run-view", rv, "--step-time", "100", "--world-size", "4", "--json",
                 "--global-batch-size", "24", "--soak-steps", "4"])  # fmt: skip
    r = json.loads(capsys.readouterr().out.strip())
    view = views.view("a")
    assert r["tokens"] == view.tokens_per_epoch and 0 < r["bytes_per_token"] < 4
    expected = 24 * views.SEQ_LEN * r["bytes_per_token"] / (100 * 0.7)
    assert r["demand_bytes_per_s"] == pytest.approx(expected)
    assert r["demand_tokens_per_s_per_rank"] == pytest.approx(24 * views.SEQ_LEN / 4 / 70)
    assert r["achieved"]["steps"] == 4 and r["achieved"]["tokens_per_s"] > 0
    assert r["enough"] and code == 0  # 100 s steps: any storage keeps up
    # a step time no storage path meets: the verdict says so and the exit code is 3
    code = main(["capacity", "--run-view", rv, "--step-time", "1e-9", "--world-size", "4", "--soak-steps", "3",
                 "--global-batch-size", "24"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 3 and "NOT enough" in out and "bytes/token" in out


def test_capacity_names_a_missing_view(home, capsys):
    assert main(["capacity", "--run-view", "no-such-view", "--step-time", "1", "--world-size", "2"]) == 2
    assert "RunViewNotFound" in capsys.readouterr().err
