"""A real Ray cluster on loopback (for `make cluster-demo` and the tests): `ray start --block` processes it owns.

Head on 127.0.0.2, worker on 127.0.0.3 (Ray rewrites 127.0.0.1 to the host address), 1 CPU each, every port
drawn free, its own temp dir, token auth (Ray 2.60: `RAY_AUTH_MODE=token` and one `RAY_AUTH_TOKEN` in every
process: head, worker and driver). Stopping kills exactly the process groups started here (SIGTERM, then
SIGKILL after a timeout: gcs_server may ignore SIGTERM for 10 s), never `ray stop`, which would kill every
Ray process on the machine.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.local_cluster.servers import free_port, free_port_window, free_ports

HEAD_IP = "127.0.0.2"
WORKER_IPS = ("127.0.0.3", "127.0.0.4", "127.0.0.5")
RAY = str(Path(sys.executable).with_name("ray"))


def _node_ports() -> list[str]:
    """Every port a node listens on, drawn free on every address (`free_ports`), so two nodes, two clusters or
    another test's servers never collide."""
    names = (
        "node-manager",
        "object-manager",
        "dashboard-agent-listen",
        "dashboard-agent-grpc",
        "runtime-env-agent",
        "metrics-export",  # Ray's Prometheus exporter: it listens on every address, not just the node's
    )
    worker_lo = free_port_window(100)
    return [
        *(f"--{name}-port={port}" for name, port in zip(names, free_ports(len(names)), strict=True)),
        f"--min-worker-port={worker_lo}",
        f"--max-worker-port={worker_lo + 99}",
    ]


@dataclass
class RayCluster:
    """A running cluster: `address` (GCS, host:port) for `ray.init` and the Ray executor, `env` (the auth
    variables every driver needs), the `ray start` processes and the IP of each node."""

    address: str
    env: dict[str, str]
    temp_dir: str
    client_address: str = ""  # ray://host:port of the head's Ray Client server
    proc_env: dict[str, str] = field(default_factory=dict, repr=False)  # os.environ + auth, for node processes
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)  # node ip -> its `ray start --block`

    @property
    def node_ips(self) -> list[str]:
        return list(self.procs)

    def worker_pids(self, node_ip: str) -> list[int]:
        """The PIDs of the Ray worker processes (titled `ray::...`) under `node_ip`'s `ray start`."""
        return [pid for pid in _descendants(self.procs[node_ip].pid) if cmdline(pid).startswith("ray::")]

    def add_worker(self, node_ip: str, num_cpus: int = 1) -> None:
        """Start one more worker node on `node_ip` and wait until the cluster sees it. A node that exits while
        starting is started once more on fresh ports (its log tail is printed to stderr); a second exit fails."""
        for attempt in (1, 2):
            self.procs[node_ip] = _start(
                [
                    RAY,
                    "start",
                    "--block",
                    f"--address={self.address}",
                    f"--node-ip-address={node_ip}",
                    f"--num-cpus={num_cpus}",
                    *_node_ports(),
                ],
                self.proc_env,
                self.log_path(node_ip),
            )
            try:
                return wait_for_nodes(self, len(self.procs))
            except NodeExited as exc:
                if attempt == 2 or exc.ip != node_ip:
                    raise
                print(f"{exc}; starting it once more on fresh ports", file=sys.stderr)
                self.stop_node(node_ip)

    def log_path(self, node_ip: str) -> Path:
        """The `ray start` output of the node on `node_ip`."""
        return Path(self.temp_dir) / ("head.log" if node_ip == HEAD_IP else f"node-{node_ip}.log")

    def stop_node(self, node_ip: str, timeout: float = 5.0) -> None:
        _stop(self.procs.pop(node_ip), timeout)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from /proc (Linux), None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def cmdline(pid: int) -> str:
    """A process's command line (a Ray worker's shows its title, e.g. `ray::IDLE` or `ray::<task name>`)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children of children, ...)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _proc_stat(int(entry.name))) is not None:
            parents.setdefault(st[1], []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM the process group we created (and any descendant that left it), SIGKILL what is left."""
    family = [proc.pid, *_descendants(proc.pid)]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    for pid in family[1:]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in family):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in family:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _alive(pid: int) -> bool:
    st = _proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


class NodeExited(RuntimeError):
    """A node's `ray start` exited while the cluster waited for it; the message ends with its log's tail."""

    def __init__(self, ip: str, returncode: int, log: Path):
        try:
            tail = log.read_text(errors="replace")[-2000:]
        except OSError as exc:
            tail = f"(no log: {exc})"
        super().__init__(f"ray node {ip} exited with {returncode}; {log} ends:\n{tail}")
        self.ip = ip


def _gcs_listening(address: str) -> bool:
    """Whether the head's GCS port accepts a TCP connection yet (a driver started before that blocks in
    `ray.init` for up to a minute, retrying on its own)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def wait_for_nodes(cluster: RayCluster, n: int, timeout: float = 180.0) -> None:
    """Until `n` nodes are alive (asked from a short-lived driver process, so this process stays unconnected).
    A node process that exits raises `NodeExited`; a probe driver that hangs (a loaded machine, a GCS still
    starting) is killed after at most 60 s and the cluster asked again, never taken as an answer."""
    probe = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False);"
        "print(sum(1 for x in ray.nodes() if x['Alive']))"
    )
    deadline = time.monotonic() + timeout
    last = "the head's GCS port never accepted a connection"
    while (left := deadline - time.monotonic()) > 0:
        for ip, proc in cluster.procs.items():
            if proc.poll() is not None:
                raise NodeExited(ip, proc.returncode, cluster.log_path(ip))
        if not _gcs_listening(cluster.address):
            time.sleep(0.5)
            continue
        try:
            r = subprocess.run(
                [sys.executable, "-c", probe, cluster.address],
                env=cluster.proc_env,
                capture_output=True,
                text=True,
                timeout=min(max(left, 5.0), 60.0),
            )
        except subprocess.TimeoutExpired as exc:
            last = f"a probe driver hung for {exc.timeout:.0f} s and was killed"
            continue
        last = (r.stdout.strip().splitlines() or [""])[-1] + r.stderr[-500:]
        if r.returncode == 0 and last.split()[0].isdigit() and int(last.split()[0]) >= n:
            return
        time.sleep(1.0)
    raise TimeoutError(f"ray cluster at {cluster.address}: fewer than {n} nodes alive after {timeout}s: {last}")


_TOKEN: list[str] = []


def process_token() -> str:
    """One Ray auth token for every cluster this process starts: Ray reads the token once per driver process,
    so a second cluster with another token would refuse this process (`InvalidAuthToken`)."""
    if not _TOKEN:
        _TOKEN.append(secrets.token_hex(32))
    return _TOKEN[0]


@contextlib.contextmanager
def ray_cluster(
    workers: int = 1, cpus_per_node: int = 1, head_cpus: int | None = None, node_env: dict[str, str] | None = None
) -> Iterator[RayCluster]:
    """A head (127.0.0.2) plus `workers` worker nodes (127.0.0.3, ...), `cpus_per_node` CPUs each (the head:
    `head_cpus`, default the same; 0 = it runs no task), with `node_env` added to the nodes' environment (their
    TOKENLAKE_CATALOG file, AWS credentials: what a task's node must hold itself); yields the running cluster;
    stops exactly the processes it started, whatever happens."""
    temp_dir = tempfile.mkdtemp(prefix="tlray", dir="/tmp")  # short: Ray's unix socket paths must fit 107 bytes
    env = {**os.environ, **(node_env or {}), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": process_token()}
    env.pop("RAY_ADDRESS", None)
    port = free_port()
    auth = {k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    client_port = free_port()
    cluster = RayCluster(f"{HEAD_IP}:{port}", auth, temp_dir, f"ray://{HEAD_IP}:{client_port}", env)
    try:
        cluster.procs[HEAD_IP] = _start(
            [
                RAY,
                "start",
                "--head",
                "--block",
                f"--node-ip-address={HEAD_IP}",
                f"--port={port}",
                f"--num-cpus={cpus_per_node if head_cpus is None else head_cpus}",
                f"--temp-dir={temp_dir}",
                "--include-dashboard=false",
                "--disable-usage-stats",
                f"--ray-client-server-port={client_port}",
                *_node_ports(),
            ],
            env,
            cluster.log_path(HEAD_IP),
        )
        wait_for_nodes(cluster, 1)
        for ip in WORKER_IPS[:workers]:
            cluster.add_worker(ip, cpus_per_node)
        yield cluster
    finally:
        for ip in reversed(list(cluster.procs)):
            _stop(cluster.procs.pop(ip), 5.0)
        shutil.rmtree(temp_dir, ignore_errors=True)
