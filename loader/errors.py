"""Named errors of the loader: every refusal says what was wrong, with the offending value, and what to do.

All derive from `LoaderError`; the ones raised when a saved state does not fit the loader it is loaded into
derive from `StateMismatch`, so a trainer can catch "wrong checkpoint for this data" in one clause.
"""

from __future__ import annotations


class LoaderError(RuntimeError):
    """Base class of every error the loader raises on purpose. Keyword arguments become attributes that name the
    offending value (a class declares each with its default, None: what it is when torch re-raises the error
    from a DataLoader worker, with the message alone)."""

    def __init__(self, message: str = "", **named: object) -> None:
        super().__init__(message)
        self.__dict__.update(named)


# --- opening a run view ---------------------------------------------------------------------------------


class RunViewNotFound(LoaderError):
    """No run view with this id in run_view.manifests (or no bundle at this path)."""


class RunViewNotPublished(LoaderError):
    """The run view is still a candidate: it has not been approved."""


class RunViewRejected(LoaderError):
    """A reviewer rejected the run view; it can never be trained on."""


class RunViewSuperseded(LoaderError):
    """A deletion request superseded the run view; `superseded_by_request` names it."""

    superseded_by_request: str | None = None


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

    doc_id: str | None = None


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
