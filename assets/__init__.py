"""Dagster assets, one sub-package per state (raw, curated, ...): pure modules plus a thin defs.py."""
