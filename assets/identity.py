"""Who decides: people's names compared as people read them, and the user a deployment authenticated for a run.
No Dagster: the gates (governance's proposals, run_view's publish_run_view) call it with the run's tags.

A name is stored as typed (the audit trail) and compared normalised, so "Alice" cannot approve what " alice "
proposed. Dagster OSS has no login: what a person types as `reviewer` is a claim. A deployment that knows who
launched a run (an authenticating proxy in front of the webserver, or its own launcher) puts the user in a run
tag; Dagster+ tags runs launched from its UI with `dagster/user`. Where a run carries one, the typed reviewer must
be that user."""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping

AUTHENTICATED_USER_TAG = "tokenlake/authenticated_user"  # what a deployment's proxy or launcher sets
AUTHENTICATED_USER_TAG_ENV = "TOKENLAKE_AUTHENTICATED_USER_TAG"  # another tag name, where a deployment has one
DAGSTER_PLUS_USER_TAG = "dagster/user"  # Dagster+ sets it on runs launched from its UI


class NotTheAuthenticatedUser(ValueError):
    """The typed reviewer is not the user the deployment authenticated for this run."""


def identity(name: str | None) -> str:
    """The form names are compared in: NFKC (full-width and compatibility characters folded), case-folded,
    inner whitespace collapsed, trimmed."""
    return " ".join(unicodedata.normalize("NFKC", name or "").casefold().split())


def same_person(a: str | None, b: str | None) -> bool:
    """Whether two typed names name the same person (`identity` of both equal)."""
    return identity(a) == identity(b)


def authenticated_user_tags() -> tuple[str, str]:
    """The run tags read for the authenticated user, first found wins: $TOKENLAKE_AUTHENTICATED_USER_TAG
    (default tokenlake/authenticated_user), then Dagster+'s dagster/user."""
    return (os.environ.get(AUTHENTICATED_USER_TAG_ENV) or AUTHENTICATED_USER_TAG, DAGSTER_PLUS_USER_TAG)


def authenticated_user(tags: Mapping[str, str]) -> str | None:
    """The user the deployment authenticated for a run with these tags, as the tag gives it; None without one."""
    return next((tags[t].strip() for t in authenticated_user_tags() if (tags.get(t) or "").strip()), None)


def require_authenticated(reviewer: str, authenticated: str | None) -> None:
    """Refuse a typed reviewer who is not the run's authenticated user (nothing to compare without one)."""
    if authenticated is not None and not same_person(reviewer, authenticated):
        raise NotTheAuthenticatedUser(
            f"reviewer {reviewer!r} is not {authenticated!r}, the user this run was launched by (run tag "
            f"{' or '.join(authenticated_user_tags())}): decide under your own name"
        )


def recorded(authenticated: str | None) -> dict[str, str]:
    """The snapshot property a decision's commit records the authenticated user in (none without one)."""
    return {"authenticated-user": authenticated} if authenticated else {}
