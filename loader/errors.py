"""Named errors of the loader: every refusal says what was wrong, with the offending value, and what to do.

All derive from `LoaderError`; the ones raised when a saved state does not fit the loader it is loaded into
derive from `StateMismatch`, so a trainer can catch "wrong checkpoint for this data" in one clause.
"""

from __future__ import annotations


class LoaderError(RuntimeError):
    """Base class of every error the loader raises on purpose."""


# --- opening a run view ---------------------------------------------------------------------------------


class RunViewNotFound(LoaderError):
    """No run view with this id in run_view.manifests (or no bundle at this path)."""


class RunViewNotPublished(LoaderError):
    """The run view is still a candidate: it has not been approved."""


class RunViewRejected(LoaderError):
    """A reviewer rejected the run view; it can never be trained on."""


class RunViewSuperseded(LoaderError):
    """A deletion request superseded the run view; `superseded_by_request` names it."""

    def __init__(self, message: str, superseded_by_request: str | None = None):
        super().__init__(message)
        self.superseded_by_request = superseded_by_request


class ManifestIntegrityError(LoaderError):
    """The stored manifest bytes do not hash to the recorded manifest_sha256, or the manifest is malformed."""


class SamplesMismatch(LoaderError):
    """run_view.samples at the view's tag does not match the manifest (count, tokens or digest)."""


class MissingDocument(LoaderError):
    """A sample's document is not in tokenized.documents at the pinned snapshot."""


class UnsupportedLayout(LoaderError):
    """The pinned token files cannot be read row group by row group (e.g. merge-on-read delete files)."""


class ChecksumMismatch(LoaderError):
    """Token bytes read do not hash to the recorded tokens_sha256; `doc_id` names the document."""

    def __init__(self, message: str, doc_id: str | None = None):
        super().__init__(message)
        self.doc_id = doc_id  # None only when re-raised from a DataLoader worker (torch passes the message alone)


# --- configuring and resuming ---------------------------------------------------------------------------


class BadWorldSize(LoaderError):
    """The world size does not divide the global batch size, or the rank is out of range."""


class StateMismatch(LoaderError):
    """A saved loader state does not belong to this loader (base class of the refusals below)."""


class RunViewMismatch(StateMismatch):
    """The state was saved on another run view."""


class ManifestMismatch(StateMismatch):
    """Same run view id but another manifest hash (never expected: ids are content-addressed)."""


class TokenizerMismatch(StateMismatch):
    """The state was saved with another tokenizer id."""


class SeedMismatch(StateMismatch):
    """The state was saved with another shuffle seed."""


class PackingMismatch(StateMismatch):
    """The state was saved with another packing (seq_len, eos_id or cross-document attention policy)."""


class GlobalBatchSizeMismatch(StateMismatch):
    """The state was saved with another global batch size: global batch k would hold other sequences."""


class StateVersionMismatch(StateMismatch):
    """The state was written by another (unknown) version of the loader's state format or order."""


class MalformedState(StateMismatch):
    """The object given to load_state_dict is not a loader state (missing keys, wrong types)."""
