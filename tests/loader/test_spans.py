"""Audit spans and sample indices (loader.spans): built only when read, equal to the per-sequence pieces that
`BatchPlan.spans` computes sequence by sequence, and plain lists for anything that leaves the process."""

from __future__ import annotations

import json
import pickle

import pytest

from loader import RunViewLoader
from loader.spans import AuditSpans, SampleIndices
from tests.loader import views
from tests.loader.views import GLOBAL_BATCH


def expected(plan, step: int, rank: int, world: int) -> tuple[list, list]:
    _, _, pieces = plan.spans(step, rank, world)
    ids = plan.view.doc_ids
    return [[(ids[s], a, b) for s, a, b in seq] for seq in pieces], [[s for s, _, _ in seq] for seq in pieces]


@pytest.mark.parametrize("world", [1, 3])
def test_spans_equal_the_pieces_of_every_sequence_including_the_padded_batch(world):
    view = views.view("a")
    spe = RunViewLoader(view, GLOBAL_BATCH).plan.schedule.steps_per_epoch
    data = RunViewLoader(view, GLOBAL_BATCH, rank=world - 1, world_size=world, max_steps=spe + 1, prefetch=0)
    batches = list(data)
    assert len(batches) == spe + 1
    for b in batches:
        docs, samples = expected(data.plan, b["step"], world - 1, world)
        assert isinstance(b["documents"], AuditSpans) and isinstance(b["sample_indices"], SampleIndices)
        assert b["documents"] == docs and docs == b["documents"]  # both ways round
        assert b["sample_indices"] == samples
        assert len(b["documents"]) == GLOBAL_BATCH // world == len(b["input_ids"])
        assert [list(seq) for seq in b["documents"]] == docs and b["documents"][1:] == docs[1:]
    padded = batches[spe - 1]["documents"]
    assert any(seq == [] for seq in padded)  # the epoch's last batch is padded with sequences of no document
    assert batches[0]["documents"] != batches[1]["documents"]


def test_spans_are_built_on_first_read_only_and_leave_the_process_as_plain_lists():
    view = views.view("a")
    (b,) = list(RunViewLoader(view, GLOBAL_BATCH, max_steps=1, prefetch=0))
    spans, samples = b["documents"], b["sample_indices"]
    assert spans._lists is None and samples._lists is None  # packing built no Python tuple
    docs, idx = expected(RunViewLoader(view, GLOBAL_BATCH).plan, 0, 0, 1)
    assert json.loads(json.dumps(list(spans))) == [[list(p) for p in seq] for seq in docs]
    assert spans.to_list() is spans.to_list()  # built once
    moved = pickle.loads(pickle.dumps(b["documents"]))
    assert type(moved) is list and moved == docs
    assert type(pickle.loads(pickle.dumps(samples))) is list and samples == idx
    with pytest.raises(TypeError):
        hash(spans)
    assert spans != "not a sequence" and spans != samples
