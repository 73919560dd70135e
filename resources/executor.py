"""The executor seam: where a state's tasks run. Assets call `executor.map(run_task, tasks)`.

A task is small and picklable and `run_task` is pure (it reads its inputs, writes data files where it is
told, returns paths and stats, never commits), so where it runs changes nothing in the result: the commit
orders results by task index. Two executors: in-process (the default) and Ray (tasks as Ray tasks on a
running cluster), chosen by configuration only: the resource's `kind`, or the environment
(`TOKENLAKE_EXECUTOR=ray`, `TOKENLAKE_RAY_ADDRESS=host:port`, see `TaskExecutorResource`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import dagster as dg
from pydantic import Field

T = TypeVar("T")
R = TypeVar("R")
Progress = Callable[[int, int], None]  # (tasks done, tasks planned)

ENV_EXECUTOR = "TOKENLAKE_EXECUTOR"  # in_process (default) | ray
ENV_RAY_ADDRESS = "TOKENLAKE_RAY_ADDRESS"  # host:port of the GCS, or ray://host:port (Ray Client)
ENV_RAY_MAX_RETRIES = "TOKENLAKE_RAY_MAX_RETRIES"  # retries of a failed task (default 3)
ENV_RAY_RUNTIME_ENV = "TOKENLAKE_RAY_RUNTIME_ENV"  # JSON: Ray runtime_env for the job (py_modules, pip, ...)
KINDS = ("in_process", "ray")

log = logging.getLogger(__name__)


class TaskExecutor(Protocol):
    """Runs `fn` over every task; returns one result per task (any order: results carry their task index)."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress | None = None) -> list[R]: ...


class InProcessExecutor:
    """Every task in this process, one after another in plan order. A failing task raises at once: the step
    fails and nothing is committed (files already written are swept as orphans)."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress | None = None) -> list[R]:
        out = []
        for task in tasks:
            out.append(fn(task))
            if progress is not None:
                progress(len(out), len(tasks))
        return out


class TaskFailedError(RuntimeError):
    """A task failed on every attempt: the step fails, nothing is committed. Names the task's input."""


class ClusterUnreachableError(ConnectionError):
    """The configured cluster address cannot be reached (raised before any task is submitted)."""


def describe_task(task: object, position: int | None = None, limit: int = 300) -> str:
    """A short, secret-free description of a task's input: its index and what it reads (WARC files, data file
    paths of a scan slice, staged files), never the lakehouse configuration or output locations."""
    index = getattr(task, "index", position)
    parts = []
    if dataclasses.is_dataclass(task):
        for f in dataclasses.fields(task):
            value = getattr(task, f.name)
            paths = _input_paths(value)
            if paths is not None:
                parts.append(f"{f.name}={_short_list(paths)}")
    text = f"task {index}" + (f" ({', '.join(parts)})" if parts else f" ({type(task).__name__})")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _input_paths(value: object) -> list[str] | None:
    """The file paths a task field reads: strings (URIs/paths), a ScanSlice's data files; None if not input."""
    files = getattr(value, "files", None)
    if files is not None and hasattr(value, "snapshot_id"):  # a ScanSlice: data files of one snapshot
        return [getattr(getattr(f, "file", f), "file_path", str(f)) for f in files]
    if isinstance(value, str) and ("/" in value or value.endswith((".gz", ".parquet"))):
        return [value]
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _short_list(paths: Sequence[str]) -> str:
    names = [p.rsplit("/", 1)[-1] for p in paths[:3]]
    more = f" +{len(paths) - 3} more" if len(paths) > 3 else ""
    return "[" + ", ".join(names) + more + "]"


# --- Ray ---------------------------------------------------------------------------------------------------

_ray_lock = threading.Lock()
# A `ray://` connect can fail on the head's side while it forks this driver's Ray Client server (seen under load:
# the server process dies at start, "Starting Ray client server failed"); the next attempt gets a new server.
RAY_CLIENT_ATTEMPTS = 3
_ray_connected: str | None = None  # the address this process's Ray driver is connected to
TASKS_PER_NODE: Counter = Counter()  # node IP -> tasks it completed, over every Ray map of this process


def _check_reachable(address: str, timeout: float) -> None:
    """A TCP connect to the address's host:port, so a wrong address fails at once and names itself (ray.init
    would otherwise wait for a GCS that never answers). `auto` (inside a Ray job: RAY_ADDRESS) is not checked."""
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterUnreachableError(f"Ray address {address!r} is not host:port or ray://host:port")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ClusterUnreachableError(f"Ray cluster at {address!r} is unreachable: {exc}") from exc


def connect_ray(address: str, runtime_env: Mapping[str, Any] | None = None, timeout: float = 10.0) -> None:
    """Connect this process's Ray driver to the cluster at `address` (once; reconnects if the address
    changed). Errors name the address; nothing is submitted before this succeeds."""
    global _ray_connected
    import ray

    with _ray_lock:
        if _ray_connected == address and ray.is_initialized():
            return
        _check_reachable(address, timeout)
        if ray.is_initialized():
            ray.shutdown()
        attempts = RAY_CLIENT_ATTEMPTS if address.startswith("ray://") else 1
        for attempt in range(1, attempts + 1):
            try:
                ray.init(
                    address=address,
                    runtime_env=dict(runtime_env or {}) or None,
                    namespace="tokenlake",
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
                break
            except ConnectionAbortedError as exc:  # Ray Client: the head could not start this driver's server
                if attempt == attempts:
                    raise ClusterUnreachableError(
                        f"cannot connect to the Ray cluster at {address!r} ({attempts} attempts): {exc}"
                    ) from exc
                log.warning("Ray Client at %s: attempt %d of %d failed (%s); again", address, attempt, attempts, exc)
                _reset_ray_client()
                time.sleep(random.Random().uniform(0.5, 1.5) * attempt)  # own generator: global state untouched
            except Exception as exc:  # auth, version mismatch, ...: say which cluster
                raise ClusterUnreachableError(f"cannot connect to the Ray cluster at {address!r}: {exc}") from exc
        _ray_connected = address


def _reset_ray_client() -> None:
    """Drop what a failed Ray Client connect left behind, so the next `ray.init` starts clean."""
    import ray

    try:
        ray.shutdown()
    except Exception:  # noqa: BLE001 - nothing was connected; the next attempt reports its own error
        pass


def disconnect_ray() -> None:
    """Disconnect this process's driver (tests: before stopping a cluster)."""
    global _ray_connected
    import ray

    with _ray_lock:
        if ray.is_initialized():
            ray.shutdown()
        _ray_connected = None


def _on_node(fn: Callable, task: object) -> tuple[object, str]:
    """Runs on a Ray worker: the task's result and the IP of the node that ran it."""
    import ray

    return fn(task), ray.util.get_node_ip_address()


class RayExecutor:
    """Every task as a Ray task (`num_cpus` each) on the cluster at `address`. A task that raises, or whose
    worker dies, is retried up to `max_retries` times (on any node); one that fails every attempt fails the
    map with `TaskFailedError` naming its input, after cancelling the tasks still pending. `tasks_per_node`
    counts the tasks each node (by IP) completed."""

    def __init__(
        self,
        address: str,
        max_retries: int = 3,
        num_cpus: float = 1.0,
        runtime_env: Mapping[str, Any] | None = None,
        connect_timeout_s: float = 10.0,
    ) -> None:
        if not address:
            raise ValueError(f"the Ray executor needs a cluster address (resource `address` or {ENV_RAY_ADDRESS})")
        self.address, self.max_retries, self.num_cpus = address, max_retries, num_cpus
        self.runtime_env, self.connect_timeout_s = dict(runtime_env or {}), connect_timeout_s
        self.tasks_per_node: Counter = Counter()

    def connect(self) -> None:
        connect_ray(self.address, self.runtime_env, self.connect_timeout_s)

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress | None = None) -> list[R]:
        if not tasks:
            return []
        self.connect()
        import ray

        remote = ray.remote(_on_node).options(
            num_cpus=self.num_cpus,
            max_retries=self.max_retries,
            retry_exceptions=True,
            scheduling_strategy="SPREAD",
            name=f"{fn.__module__}.{getattr(fn, '__qualname__', 'task')}",
        )
        fn_ref = ray.put(fn)
        task_of = {remote.remote(fn_ref, task): (i, task) for i, task in enumerate(tasks)}
        pending, out = list(task_of), []
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    out.append(self._result(ref, *task_of[ref]))
                if progress is not None:
                    progress(len(out), len(tasks))
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=False)
            raise
        return out

    def _result(self, ref, position: int, task: object):
        import ray

        try:
            result, node = ray.get(ref)
        except (ray.exceptions.RayError, Exception) as exc:
            cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) and exc.cause else exc
            first = (str(cause).strip().splitlines() or [type(cause).__name__])[-1][:300]
            raise TaskFailedError(
                f"{describe_task(task, position)} failed on every attempt ({self.max_retries + 1}) on the Ray "
                f"cluster at {self.address!r}: {type(cause).__name__}: {first}"
            ) from exc
        self.tasks_per_node[node] += 1
        TASKS_PER_NODE[node] += 1
        return result


class TaskExecutorResource(dg.ConfigurableResource):
    """Where the tasks of every state run. `in_process`: in the step's own process, in plan order. `ray`:
    as Ray tasks on a running cluster at `address` (the step still plans and commits). Left empty, each
    setting comes from the environment: `TOKENLAKE_EXECUTOR` (in_process | ray, default in_process),
    `TOKENLAKE_RAY_ADDRESS`, `TOKENLAKE_RAY_MAX_RETRIES` (default 3), `TOKENLAKE_RAY_RUNTIME_ENV` (JSON)."""

    kind: str = Field(
        default="",
        pattern="^(|in_process|ray)$",
        description="in_process: tasks run in the step's process, in plan order; ray: tasks run on the Ray "
        f"cluster at `address`; empty: ${ENV_EXECUTOR}, else in_process",
    )
    address: str = Field(
        default="",
        description="Ray: the cluster's GCS address host:port, ray://host:port (Ray Client) or auto (this process "
        f"runs on a Ray node, e.g. a step launched by dagster-ray); empty: ${ENV_RAY_ADDRESS}",
    )
    max_retries: int = Field(
        default=-1,
        description=f"Ray: retries of a failing task before the step fails; -1: ${ENV_RAY_MAX_RETRIES}, else 3",
    )
    num_cpus: float = Field(default=1.0, description="Ray: CPUs each task reserves")
    runtime_env: str = Field(
        default="",
        description=f"Ray: the job's runtime_env as JSON (e.g. py_modules/pip for a cluster without the project "
        f"installed); empty: ${ENV_RAY_RUNTIME_ENV}",
    )
    connect_timeout_s: float = Field(default=10.0, description="Ray: seconds to wait for the address to answer")

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Fail before the step does any work when the Ray address is missing or does not answer."""
        if self.resolved_kind() == "ray":
            address = self.address or os.environ.get(ENV_RAY_ADDRESS, "")
            if not address:
                raise ValueError(f"executor kind 'ray' needs a cluster address (`address` or {ENV_RAY_ADDRESS})")
            _check_reachable(address, self.connect_timeout_s)

    def resolved_kind(self) -> str:
        kind = self.kind or os.environ.get(ENV_EXECUTOR, "") or "in_process"
        if kind not in KINDS:
            raise ValueError(f"unknown executor kind {kind!r} (from {ENV_EXECUTOR}); expected one of {KINDS}")
        return kind

    def executor(self) -> TaskExecutor:
        if self.resolved_kind() == "in_process":
            return InProcessExecutor()
        retries = self.max_retries if self.max_retries >= 0 else int(os.environ.get(ENV_RAY_MAX_RETRIES, "3"))
        runtime_env = self.runtime_env or os.environ.get(ENV_RAY_RUNTIME_ENV, "")
        return RayExecutor(
            self.address or os.environ.get(ENV_RAY_ADDRESS, ""),
            max_retries=retries,
            num_cpus=self.num_cpus,
            runtime_env=json.loads(runtime_env) if runtime_env else None,
            connect_timeout_s=self.connect_timeout_s,
        )
