"""One definition per knob: a pure dataclass field carries its default and its explanation; the Dagster
shell (`assets.shell.config_from`) generates the Launchpad config from it. No Dagster here."""

from __future__ import annotations

import dataclasses


def knob(default, doc: str) -> dataclasses.Field:
    """A dataclass field with a default and a one-line explanation (shown in the Launchpad)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError(f"knob default {default!r} is mutable: use a tuple")
    return dataclasses.field(default=default, metadata={"doc": doc})
