"""Must-show 2 and 3: resuming from every step equals the uninterrupted run bit for bit; three successive
resumes, one across an epoch boundary; elastic resume onto another world size; torchdata's
StatefulDataLoader protocol."""

from __future__ import annotations

import io
import json

import pytest
import torch

from loader import RunViewDataset, RunViewLoader
from tests.loader import views
from tests.loader.views import GLOBAL_BATCH, concat_ranks, run, same_batch, same_global

SMALL_BATCH = 8  # 147 sequences -> 19 steps per epoch


@pytest.fixture(scope="module")
def reference():
    view = views.view("a")
    spe = RunViewLoader(view, SMALL_BATCH).plan.schedule.steps_per_epoch
    steps = spe + 4  # crosses the epoch boundary
    data = RunViewLoader(view, SMALL_BATCH, max_steps=steps)
    ref, states = [], [data.state_dict()]
    for b in data:
        ref.append(b)
        states.append(data.state_dict())
    assert len(ref) == steps and [s["global_step"] for s in states] == list(range(steps + 1))
    return view, steps, ref, states


def roundtrip(state: dict) -> dict:
    """What a checkpoint does to the state: JSON and torch.save both keep it intact."""
    buf = io.BytesIO()
    torch.save(json.loads(json.dumps(state)), buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_resume_from_every_step_equals_the_uninterrupted_run(reference):
    view, steps, ref, states = reference
    for s in range(steps + 1):
        data = RunViewLoader(view, SMALL_BATCH, max_steps=steps)
        data.load_state_dict(roundtrip(states[s]))
        rest = run(data)
        assert len(rest) == steps - s
        assert all(same_batch(x, y) for x, y in zip(rest, ref[s:])), f"resume at step {s}"


@pytest.mark.parametrize("num_workers", [2])
def test_resume_with_dataloader_workers_and_prefetch(reference, num_workers):
    view, steps, ref, states = reference
    for s in (1, 18, 20):
        data = RunViewLoader(view, SMALL_BATCH, max_steps=steps, num_workers=num_workers, prefetch=2)
        data.load_state_dict(states[s])
        rest = run(data)
        assert all(same_batch(x, y) for x, y in zip(rest, ref[s:], strict=True))


def test_metrics_see_every_batch_and_row_group_read(reference):
    from loader.metrics import LoaderMetrics

    view, steps, ref, _ = reference
    metrics = LoaderMetrics()
    served = run(RunViewLoader(view, SMALL_BATCH, max_steps=5, prefetch=2, metrics=metrics))
    summary = metrics.summary()
    assert summary["batches"] == 5 and summary["tokens"] == 5 * SMALL_BATCH * views.SEQ_LEN
    assert summary["reads"] >= 1 and summary["read_latency_p99"] >= summary["read_latency_p50"] > 0
    assert 0 <= summary["data_wait_fraction"] <= 1
    assert all(same_batch(x, y) for x, y in zip(served, ref))
    assert view.source.on_read is None  # the shared view is not rewired


def test_three_successive_resumes_one_across_the_epoch_boundary(reference):
    view, steps, ref, _ = reference
    spe = steps - 4
    served, state, cursors = [], None, []
    for stop in (5, 12, spe + 2, steps):  # the third segment runs from step 12 into epoch 1
        data = RunViewLoader(view, SMALL_BATCH, max_steps=steps)
        if state is not None:
            data.load_state_dict(roundtrip(state))
        served += run(data, stop - data.global_step)
        state = data.state_dict()
        cursors.append(state["global_step"])
    assert cursors == [5, 12, spe + 2, steps]  # the cursor only moves forward
    assert [b["epoch"] for b in served].count(1) == 4
    assert len(served) == steps and all(same_batch(x, y) for x, y in zip(served, ref))


@pytest.mark.parametrize(("a", "b"), [(4, 2), (2, 4), (3, 6), (8, 1)])
def test_elastic_resume_onto_another_world_size(a, b):
    view = views.view("a")
    spe = RunViewLoader(view, GLOBAL_BATCH).plan.schedule.steps_per_epoch
    steps, stop = spe + 2, spe - 2
    ref = run(RunViewLoader(view, GLOBAL_BATCH, max_steps=steps))
    first = [RunViewLoader(view, GLOBAL_BATCH, rank=r, world_size=a, max_steps=steps) for r in range(a)]
    before = [run(d, stop) for d in first]
    saved = [d.state_dict() for d in first]
    assert all(s == saved[0] for s in saved)  # one global cursor: identical on every rank
    after = []
    for r in range(b):
        d = RunViewLoader(view, GLOBAL_BATCH, rank=r, world_size=b, max_steps=steps)
        d.load_state_dict(roundtrip(saved[0]))
        after.append(run(d))
    served = [concat_ranks([x[k] for x in before]) for k in range(stop)] + [
        concat_ranks([x[k] for x in after]) for k in range(steps - stop)
    ]
    consumed = [(g["step"], int(i)) for g in served for i in g["sequence_index"]]
    assert len(consumed) == len(set(consumed)) == steps * GLOBAL_BATCH  # nothing twice, nothing skipped
    assert all(same_global(x, y) for x, y in zip(served, ref, strict=True))


@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")
def test_torchdata_stateful_dataloader_resumes_each_worker_on_its_stride(reference):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    from loader.dataset import keep_batch

    view, steps, ref, _ = reference
    for workers in (0, 2):
        loader = sdl.StatefulDataLoader(
            RunViewDataset(view, SMALL_BATCH, max_steps=steps),
            batch_size=None,
            num_workers=workers,
            collate_fn=keep_batch,
        )
        it = iter(loader)
        head = [next(it) for _ in range(7)]
        state = loader.state_dict()
        del it
        resumed = sdl.StatefulDataLoader(
            RunViewDataset(view, SMALL_BATCH, max_steps=steps),
            batch_size=None,
            num_workers=workers,
            collate_fn=keep_batch,
        )
        resumed.load_state_dict(state)
        served = head + list(resumed)
        assert [b["step"] for b in served] == list(range(steps)), workers
        assert all(same_batch(x, y) for x, y in zip(served, ref))
