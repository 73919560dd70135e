"""The frozen `Manifest` (iceberg_catalog.run_view_contract): built from a candidate's manifest dict it holds the
exact stored bytes and hash (the run view id does not move), reads back what the dict says, and cannot be changed."""

from __future__ import annotations

import dataclasses

import pytest

from assets.run_view import store
from iceberg_catalog.run_view_contract import TOKENS_TABLE, Manifest, canonical_json, manifest_sha256
from tests.run_view import builders


def test_manifest_keeps_the_stored_bytes_hash_and_values(lakehouse):
    builders.write_documents(lakehouse, n_docs=12)
    builders.screen(lakehouse)
    result = builders.candidate(lakehouse, name="frozen", epochs=2)
    stored = store.load_manifest(lakehouse, result.run_view_id)
    m = Manifest.from_dict(result.manifest)
    assert m.text == stored["manifest_json"] == canonical_json(result.manifest)
    assert m.sha256 == stored["manifest_sha256"] == manifest_sha256(result.manifest) == result.manifest_sha256
    again = Manifest.from_json(stored["manifest_json"])
    assert again == m and hash(again) == hash(m) and Manifest.of(m) is m
    assert canonical_json(again.to_dict()) == m.text and again.to_dict() == stored["manifest"]
    d = stored["manifest"]
    assert (m.name, m.seed, m.epochs) == (d["name"], d["seed"], d["epoch_policy"]["epochs"]) == ("frozen", 0, 2)
    assert (m.tokenizer_id, m.tokenizer_name) == (d["tokenizer"]["tokenizer_id"], d["tokenizer"]["name"])
    assert (m.n_samples, m.n_tokens, m.samples_sha256) == tuple(
        d["samples"][k] for k in ("n_samples", "n_tokens", "sha256")
    )
    assert dict(m.inputs) == d["inputs"] and dict(m.packing) == d["packing"] and m.split is None
    assert [dict(r) for r in m.realised] == d["realised"] and dict(m.quarantine) == d["quarantine"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.seed = 1
    with pytest.raises(TypeError):
        m.inputs[TOKENS_TABLE] = None  # a read-only view of the pinned snapshots


def test_a_manifest_without_a_key_the_loader_needs_is_refused():
    with pytest.raises(ValueError, match="manifest has no 'packing'"):
        Manifest.from_dict({"format": "x", "tokenizer": {"tokenizer_id": "t"}, "seed": 0, "samples": {}, "inputs": {}})
