"""tokenlake.loader: deterministic, resumable training input from a published run view.

Imports no Dagster: training code does `import loader` with only torch, pyarrow and pyiceberg installed.

    view = loader.open_run_view("web-en-3f2a9c1d0b7e")            # or open_run_view(bundle="/path/to/bundle")
    data = loader.RunViewLoader(view, global_batch_size=512)    # rank/world from torch.distributed
    state = {"model": ..., "loader": data}                      # the loader is a DCP Stateful
    loader.dcp.load(state, "ckpt/")                              # any world size dividing 512
    for batch in data: ...; loader.dcp.save(state, "ckpt/", batch["step"] + 1)

Modules: view (open a run view), catalog (read and check a published view in the lakehouse), bundles (export /
open a bundle), sources (verified token reads), order (global order and step arithmetic), packing (vectorised
batch packing), plan (BatchPlan: the pure step and window arithmetic), read_ahead (segment reads and the read-ahead
thread), state (the cursor and its fingerprint checks), dataset (RunViewDataset, RunViewLoader), storage (row-group
reads: S3, retries, node-local cache, read-ahead), dcp (torch distributed checkpoint), audit (reconstruct_batch,
steps_serving), metrics, errors.
"""

from loader import dcp
from loader.audit import ServedSpan, audit_record, batch_digest, reconstruct_batch, steps_serving
from loader.bundles import export_run_view
from loader.dataset import RunViewDataset, RunViewLoader
from loader.errors import (
    BadWorldSize,
    ChecksumMismatch,
    GlobalBatchSizeMismatch,
    LoaderError,
    MalformedState,
    ManifestIntegrityError,
    ManifestMismatch,
    MissingDocument,
    PackingMismatch,
    RunViewMismatch,
    RunViewNotFound,
    RunViewNotPublished,
    RunViewRejected,
    RunViewSuperseded,
    SamplesMismatch,
    SeedMismatch,
    StateMismatch,
    StateVersionMismatch,
    TokenizerMismatch,
    UnsupportedLayout,
)
from loader.order import ORDER_VERSION, Schedule, epoch_order
from loader.packing import IGNORE_INDEX, PackedSequence, pack_documents, pack_sequence, unpack
from loader.plan import BatchPlan
from loader.state import STATE_VERSION, check_state, make_state
from loader.storage import StorageConfig, StorageError
from loader.view import RunView, in_memory_view, open_run_view

__all__ = [
    "IGNORE_INDEX",
    "ORDER_VERSION",
    "STATE_VERSION",
    "BadWorldSize",
    "BatchPlan",
    "ChecksumMismatch",
    "GlobalBatchSizeMismatch",
    "LoaderError",
    "MalformedState",
    "ManifestIntegrityError",
    "ManifestMismatch",
    "MissingDocument",
    "PackedSequence",
    "PackingMismatch",
    "RunView",
    "RunViewDataset",
    "RunViewLoader",
    "RunViewMismatch",
    "RunViewNotFound",
    "RunViewNotPublished",
    "RunViewRejected",
    "RunViewSuperseded",
    "SamplesMismatch",
    "Schedule",
    "SeedMismatch",
    "ServedSpan",
    "StateMismatch",
    "StateVersionMismatch",
    "StorageConfig",
    "StorageError",
    "TokenizerMismatch",
    "UnsupportedLayout",
    "audit_record",
    "dcp",
    "batch_digest",
    "check_state",
    "epoch_order",
    "export_run_view",
    "in_memory_view",
    "make_state",
    "open_run_view",
    "pack_documents",
    "pack_sequence",
    "reconstruct_batch",
    "steps_serving",
    "unpack",
]
