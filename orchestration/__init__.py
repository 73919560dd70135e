"""Dagster wiring: the Definitions object, jobs, sensors and the demo/CLI entry points."""
