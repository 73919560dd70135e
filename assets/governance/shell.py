"""The Dagster glue the governance jobs share: how a gate's job, an always-on sensor and a refusal look.

No `from __future__ import annotations`: the Dagster modules of this folder read runtime annotations."""

import dagster as dg

from iceberg_catalog import Provenance, config_hash


def gate_job(gate: str, name: str | None = None):
    """A job of `gate` (`governance` or `policy`), run in one process: each is a single op, and in-process runs
    keep the Launchpad and `tokenlake` commands equally quick."""
    return dg.job(name=name, tags={"tokenlake/gate": gate}, executor_def=dg.in_process_executor)


def running_sensor(name: str, job_name: str, seconds: int):
    """A sensor that is on by default (governance must act without anyone remembering to switch it on), bound
    to its job by name (binding the op job object would re-create the sensor: a beta warning); its docstring,
    one line, is the description the UI shows."""

    def decorate(fn):
        return dg.sensor(
            name=name,
            job_name=job_name,
            minimum_interval_seconds=seconds,
            default_status=dg.DefaultSensorStatus.RUNNING,
            description=" ".join(fn.__doc__.split()),
        )(fn)

    return decorate


def op_provenance(context: dg.OpExecutionContext, asset: str, key: str, code_version: str, config: dg.Config):
    """The provenance of a commit an op makes for `asset` (a governance table), keyed by `key`, under its config."""
    return Provenance(asset, key, context.run_id, code_version, config_hash(config.model_dump()))


def refused(exc: Exception, proposal_id: str) -> dg.Failure:
    """A refusal as the step's failure: the class name says which rule refused, the message what to do."""
    return dg.Failure(
        description=f"{type(exc).__name__}: {exc}", metadata={"proposal_id": proposal_id, "refusal": type(exc).__name__}
    )
