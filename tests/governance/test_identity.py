"""People's names compare as people read them; the authenticated user comes from a run tag (assets/identity.py)."""

from __future__ import annotations

import pytest

from assets.identity import (
    AUTHENTICATED_USER_TAG,
    AUTHENTICATED_USER_TAG_ENV,
    NotTheAuthenticatedUser,
    authenticated_user,
    identity,
    require_authenticated,
    same_person,
)


def test_names_compare_ignoring_case_width_and_spacing():
    assert identity("  Alice\t Smith ") == "alice smith" == identity("ＡＬＩＣＥ  SMITH")
    assert same_person("Straße", "STRASSE") and same_person(None, "  ")
    assert not same_person("alice", "alicia") and not same_person("al ice", "alice")


def test_the_authenticated_user_is_the_first_tag_a_run_carries(monkeypatch):
    monkeypatch.delenv(AUTHENTICATED_USER_TAG_ENV, raising=False)
    assert authenticated_user({}) is None and authenticated_user({AUTHENTICATED_USER_TAG: " "}) is None
    assert authenticated_user({"dagster/user": " bob@example.org "}) == "bob@example.org"
    assert authenticated_user({AUTHENTICATED_USER_TAG: "Alice", "dagster/user": "bob"}) == "Alice"
    monkeypatch.setenv(AUTHENTICATED_USER_TAG_ENV, "proxy/user")
    assert authenticated_user({AUTHENTICATED_USER_TAG: "Alice", "proxy/user": "carol"}) == "carol"


def test_a_typed_reviewer_other_than_the_authenticated_user_is_refused():
    require_authenticated("anyone", None)  # no authenticated user: nothing to compare
    require_authenticated(" alice ", "Alice")
    with pytest.raises(NotTheAuthenticatedUser, match="reviewer 'alice' is not 'bob'"):
        require_authenticated("alice", "bob")
