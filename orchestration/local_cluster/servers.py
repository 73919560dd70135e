"""Real servers on loopback only, in private temp dirs, stopped by the PIDs started here: for `make cluster-demo`
and the cluster tests (`tests/cluster/servers.py` wraps them in pytest fixtures).

- `postgres_server()`: PostgreSQL 15 (Debian's binaries; `initdb` + `postgres` on a free port, password auth),
  a role and a database of its own.
- `seaweedfs_server()`: SeaweedFS (`weed server`: master, volume server, filer, S3 gateway and its Iceberg
  REST catalog), S3 credentials from a config file, one bucket created.

Each is a context manager yielding connection info. Nothing here ever kills a process it did not start.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PG_BIN = Path(os.environ.get("TOKENLAKE_PG_BIN", "/usr/lib/postgresql/15/bin"))
WEED = Path(os.environ.get("TOKENLAKE_WEED", Path(sys.executable).with_name("weed")))
HOST = "127.0.0.1"


_HANDED_OUT: set[int] = set()


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports free on every address now and never handed out before by this process.

    Drawn on the wildcard address (bound, never listened on, then released) because some servers bind more than
    the address they are given: Ray's client server also binds 127.0.0.1 and its metrics exporter every address,
    so a port free on 127.0.0.3 alone can still collide with another node's or server's (a Ray worker node then
    exits with 1 at start). Remembered, so that two draws of one process never return the same port."""
    socks: list[socket.socket] = []
    out: list[int] = []
    try:
        while len(out) < n:
            socks.append(s := socket.socket())
            s.bind(("", 0))
            if (port := s.getsockname()[1]) not in _HANDED_OUT:
                out.append(port)
        _HANDED_OUT.update(out)
        return out
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """One port as `free_ports` draws them."""
    return free_ports(1)[0]


def free_port_window(size: int) -> int:
    """The first of `size` consecutive ports (a Ray node's worker processes) between Ray's own ranges (workers
    10002-19999 by default, Ray Client's per-driver servers 23000-23999) and the kernel's ephemeral range (from
    32768, so that no outgoing connection takes one meanwhile), each free on every address, none handed out before."""
    rng = random.SystemRandom()
    for _ in range(200):
        lo = rng.randrange(24000, 32768 - size, size)
        window = set(range(lo, lo + size))
        if window & _HANDED_OUT or not all(_bindable(p) for p in window):
            continue
        _HANDED_OUT.update(window)
        return lo
    raise RuntimeError(f"no {size} consecutive free ports between 24000 and 32767 for Ray worker processes")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
        return True


def wait_for(check, what: str, timeout: float = 60.0, proc: subprocess.Popen | None = None, log: Path | None = None):
    """Poll `check()` until truthy; fail naming `what` (and the log tail) on timeout or when `proc` exits."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            break
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 - server not up yet
            last = exc
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
    state = f"exited with {proc.returncode}" if proc is not None and proc.poll() is not None else "timed out"
    raise RuntimeError(f"{what} did not come up ({state}; last error {last!r})\n{tail}")


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 20.0) -> None:
    """Stop exactly this process: `sig`, then SIGKILL after `grace` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


# --- PostgreSQL -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    user: str
    password: str
    database: str
    pid: int

    @property
    def sqlalchemy_uri(self) -> str:
        return f"postgresql+psycopg2://{self.user}:{self.password}@{self.host}:{self.port}/{self.database}"


def _as_postgres_user() -> dict:
    """Popen kwargs: PostgreSQL refuses to run as root, so run it as the `postgres` system user then."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


@contextlib.contextmanager
def postgres_server(user: str = "tokenlake", database: str = "tokenlake") -> Iterator[Postgres]:
    """PostgreSQL 15 on 127.0.0.1:<free port>, data and socket in a private temp dir, scram password auth
    for TCP; a role `user` with a random password owning database `database`."""
    root = Path(tempfile.mkdtemp(prefix="tokenlake-pg-"))
    as_pg = _as_postgres_user()
    if as_pg:
        shutil.chown(root, "postgres", "postgres")
    data, sock, log = root / "data", root / "sock", root / "postgres.log"
    sock.mkdir()
    if as_pg:
        shutil.chown(sock, "postgres", "postgres")
    superpass = secrets.token_hex(12)
    pwfile = root / "pw"
    pwfile.write_text(superpass + "\n")
    if as_pg:
        shutil.chown(pwfile, "postgres", "postgres")
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    subprocess.run(
        [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256",
         f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync"],
        check=True, capture_output=True, env=env, **as_pg,
    )  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        [str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sock), "-c", f"listen_addresses={HOST}",
         "-c", "fsync=off", "-c", "max_connections=100"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env, start_new_session=True, **as_pg,
    )  # fmt: skip
    try:
        psql = [str(PG_BIN / "psql"), "-h", str(sock), "-p", str(port), "-U", "postgres", "-v", "ON_ERROR_STOP=1"]
        wait_for(
            lambda: subprocess.run([*psql, "-c", "select 1"], capture_output=True, **as_pg).returncode == 0,
            f"PostgreSQL on {HOST}:{port}", proc=proc, log=log,
        )  # fmt: skip
        password = secrets.token_hex(16)
        # CREATE ROLE and CREATE DATABASE: separate calls (a database cannot be created inside a transaction block)
        subprocess.run([*psql, "-c", f"CREATE ROLE {user} LOGIN PASSWORD '{password}'"], check=True,
                       capture_output=True, **as_pg)  # fmt: skip
        subprocess.run([*psql, "-c", f"CREATE DATABASE {database} OWNER {user}"], check=True, capture_output=True,
                       **as_pg)  # fmt: skip
        yield Postgres(HOST, port, user, password, database, proc.pid)
    finally:
        stop(proc, signal.SIGINT)  # fast shutdown
        shutil.rmtree(root, ignore_errors=True)


# --- SeaweedFS ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeaweedFS:
    s3_endpoint: str
    iceberg_uri: str
    filer_uri: str
    access_key: str
    secret_key: str
    bucket: str
    table_bucket: str
    region: str
    pid: int
    volume_pids: tuple[int, ...] = ()

    def s3_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties for this S3 endpoint."""
        return {
            "s3.endpoint": self.s3_endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
            "s3.force-virtual-addressing": "false",
        }

    def sql_catalog_properties(self, sqlalchemy_uri: str, path: str = "wh") -> dict[str, str]:
        """A pyiceberg SqlCatalog (e.g. on PostgreSQL) whose warehouse is `s3://bucket/path` here."""
        return {"type": "sql", "uri": sqlalchemy_uri, "warehouse": f"s3://{self.bucket}/{path}", **self.s3_properties()}

    def rest_catalog_properties(self) -> dict[str, str]:
        """SeaweedFS's Iceberg REST catalog: OAuth2 client credentials = the S3 keys; the warehouse names the
        table bucket (each table bucket is one catalog)."""
        return {
            "type": "rest",
            "uri": self.iceberg_uri,
            "credential": f"{self.access_key}:{self.secret_key}",
            "warehouse": f"s3://{self.table_bucket}",
            **self.s3_properties(),
        }

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.s3_endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
        )  # fmt: skip


def _http_answers(url: str) -> bool:
    """True when an HTTP server answers at `url` (any status)."""
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True
    return True


def _data_nodes(master: str) -> int:
    """How many volume servers the master at `master` knows."""
    with urllib.request.urlopen(f"{master}/dir/status", timeout=2) as r:
        topo = json.load(r)["Topology"]
    return sum(
        len(rack.get("DataNodes") or []) for dc in topo.get("DataCenters") or [] for rack in dc.get("Racks") or []
    )


@contextlib.contextmanager
def seaweedfs_server(
    bucket: str = "tokenlake", table_bucket: str = "tables", region: str = "us-east-1", extra_volumes: int = 0
) -> Iterator[SeaweedFS]:
    """`weed server` (master + volume + filer + S3 + Iceberg REST) on 127.0.0.1 free ports, in a private temp
    dir, telemetry off, plus `extra_volumes` more volume servers (`weed volume`, own dir and ports); S3 identity
    from a config file with random keys; `bucket` (plain S3) and `table_bucket` (an S3 Tables bucket: the REST
    catalog's warehouse) created."""
    root = Path(tempfile.mkdtemp(prefix="tokenlake-weed-"))
    log = root / "weed.log"
    access, secret = "tl" + secrets.token_hex(8), secrets.token_hex(20)
    s3conf = root / "s3.json"
    s3conf.write_text(json.dumps({"identities": [{
        "name": "tokenlake", "credentials": [{"accessKey": access, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }]}))  # fmt: skip
    (m, mg, v, vg, f, fg, s3, s3g, ice) = free_ports(9)
    (root / "data").mkdir()
    cmd = [
        str(WEED), "server", f"-dir={root / 'data'}", f"-ip={HOST}", f"-ip.bind={HOST}",
        f"-master.port={m}", f"-master.port.grpc={mg}", "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
        f"-volume.port={v}", f"-volume.port.grpc={vg}", "-volume.max=16",
        "-filer", f"-filer.port={f}", f"-filer.port.grpc={fg}",
        "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3g}", f"-s3.port.iceberg={ice}", "-s3.port.lance=0",
        f"-s3.config={s3conf}", "-metricsPort=0",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=root, start_new_session=True)
    volumes: list[subprocess.Popen] = []
    try:
        for i in range(extra_volumes):
            vol_dir = root / f"volume{i + 1}"
            vol_dir.mkdir()
            vp, vpg = free_ports(2)
            vcmd = [str(WEED), "volume", f"-dir={vol_dir}", f"-ip={HOST}", f"-ip.bind={HOST}", f"-port={vp}",
                    f"-port.grpc={vpg}", f"-master={HOST}:{m}.{mg}", "-max=16", "-metricsPort=0"]  # fmt: skip
            volumes.append(subprocess.Popen(vcmd, stdout=(root / f"volume{i + 1}.log").open("ab"),
                                            stderr=subprocess.STDOUT, cwd=root, start_new_session=True))  # fmt: skip
        info = SeaweedFS(f"http://{HOST}:{s3}", f"http://{HOST}:{ice}", f"http://{HOST}:{f}", access, secret,
                         bucket, table_bucket, region, proc.pid, tuple(v.pid for v in volumes))  # fmt: skip
        wait_for(lambda: _data_nodes(f"http://{HOST}:{m}") >= 1 + extra_volumes,
                 f"{1 + extra_volumes} SeaweedFS volume servers", 60, proc, log)  # fmt: skip
        client = info.client()
        wait_for(lambda: client.list_buckets() is not None, f"SeaweedFS S3 on {HOST}:{s3}", 90, proc, log)
        wait_for(lambda: client.create_bucket(Bucket=bucket), f"bucket {bucket}", 60, proc, log)
        wait_for(lambda: _http_answers(f"{info.iceberg_uri}/v1/config"), f"SeaweedFS Iceberg REST on {HOST}:{ice}",
                 30, proc, log)  # fmt: skip
        shell = subprocess.run(
            [str(WEED), "shell", f"-master={HOST}:{m}.{mg}", f"-filer={HOST}:{f}.{fg}"],
            input=f"s3tables.bucket -create -name {table_bucket} -account admin\n",
            capture_output=True, text=True, timeout=60, cwd=root,
        )  # fmt: skip
        if f"bucket/{table_bucket}" not in shell.stdout:
            raise RuntimeError(
                f"creating table bucket {table_bucket} failed: {shell.stdout[-1000:]} {shell.stderr[-1000:]}"
            )
        yield info
    finally:
        for vol in volumes:
            stop(vol, grace=3.0)
        stop(proc, grace=3.0)  # weed waits ~20 s on SIGTERM; nothing to flush for a test: SIGKILL after 3 s
        shutil.rmtree(root, ignore_errors=True)
