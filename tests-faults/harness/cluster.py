"""A real cluster for one test: PostgreSQL (scripts/postgres-test-server.sh, in a folder of
its own), N `state-server` nodes on it, and nginx in front; a proxy we control between each
node and PostgreSQL, and between nginx and each node (so a node restarted on a new port keeps
its place in nginx's upstream). Everything listens on 127.0.0.1.

Only processes this object started are ever signalled, by their pid; `close()` (also called
by the pytest fixture's finalizer and at interpreter exit) stops them and removes the folder.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Optional

from . import http
from .proxy import Proxy, ProxyLoop

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PG_SCRIPT = os.path.join(REPO, "scripts", "postgres-test-server.sh")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

_live: set = set()
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_us(sig: int):
    """preexec_fn: the child gets `sig` when this process dies, however it dies (prctl
    PR_SET_PDEATHSIG), so no node or nginx outlives a killed test run."""
    def set_it():
        _libc.prctl(1, sig, 0, 0, 0)
    return set_it


def binary() -> str:
    path = os.environ.get("STATE_SERVER_BIN", os.path.join(REPO, ".build", "debug", "state-server"))
    if not os.path.isabs(path) and not os.path.exists(path):
        path = os.path.join(REPO, path)  # relative to the repository, as scripts/faults.sh runs it
    return os.path.abspath(path)


@atexit.register
def _close_all() -> None:
    for cluster in list(_live):
        cluster.close()


class Node:
    def __init__(self, cluster: "Cluster", index: int) -> None:
        self.cluster = cluster
        self.index = index
        self.name = "ABCDEFGH"[index]
        self.proc: Optional[subprocess.Popen] = None
        self.port: Optional[int] = None
        self.pg_proxy: Optional[Proxy] = None     # node -> PostgreSQL
        self.front: Optional[Proxy] = None        # nginx (or a client) -> node
        self.paused = False
        self.starts = 0

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, extra_env: Optional[dict] = None, pool_size: Optional[int] = None) -> None:
        c = self.cluster
        self.starts += 1
        url = re.sub(r"@127\.0\.0\.1:\d+/", f"@127.0.0.1:{self.pg_proxy.port}/", c.pg_url)
        query = ["sslmode=disable"]
        if pool_size or c.pool_size:
            query.append(f"pool_size={pool_size or c.pool_size}")
        url += "?" + "&".join(query)
        env = {k: v for k, v in os.environ.items() if not k.startswith("STATE_SERVER_")}
        env.update(c.node_env)
        env.update(extra_env or {})
        out = os.path.join(c.dir, f"node{self.name}.{self.starts}.out")
        log = open(os.path.join(c.dir, f"node{self.name}.{self.starts}.log"), "w")
        with open(out, "w") as stdout:
            self.proc = subprocess.Popen([binary(), "--host", "127.0.0.1", "--port", "0", "--storage", url],
                                         stdout=stdout, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                         preexec_fn=_die_with_us(signal.SIGKILL))
        log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                with open(out) as f:
                    line = f.readline()
            except OSError:
                line = ""
            m = re.match(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.name} exited with {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {self.name} printed no address within 60 s: {self.log_tail()}")
            time.sleep(0.05)
        self.paused = False
        if self.front is not None:
            self.front.target_port = self.port

    def log_tail(self, n: int = 15) -> str:
        path = os.path.join(self.cluster.dir, f"node{self.name}.{self.starts}.log")
        try:
            with open(path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> int:
        """SIGKILL; returns the exit status (negative signal number)."""
        if self.proc is None:
            return 0
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.paused = False
        return self.proc.wait(30)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.alive():
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                if self.alive():
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)


class Cluster:
    def __init__(self, nodes: int = 3, node_env: Optional[dict] = None, balance: str = "round_robin",
                 pool_size: Optional[int] = None, name: str = "cluster") -> None:
        self.n = nodes
        self.node_env = {
            "STATE_SERVER_REPLAY_BUFFER": "20",
            # Compaction keeps the larger of replayBuffer and history.keep: both small.
            "STATE_SERVER_HISTORY_KEEP": "20",
            "STATE_SERVER_PERSISTENCE_SNAPSHOT_EVERY": "5",
            "STATE_SERVER_LOG_LEVEL": os.environ.get("FAULTS_LOG_LEVEL", "warning"),
            "STATE_SERVER_HEARTBEAT": "2",
            # Failover within seconds: a node that cannot renew stops serving after 2.25 s,
            # its sessions move after 3 s.
            "STATE_SERVER_CLUSTER_LEASE": "3",
            # The nodes sign the requests they forward with it (required on PostgreSQL).
            "STATE_SERVER_CLUSTER_SECRET": secrets.token_hex(32),
            # The harness, nginx and the nodes all connect from 127.0.0.1: trusted as proxies (a
            # deployment lists its nodes' network), and the harness's load is many clients'.
            "STATE_SERVER_HTTP_TRUSTED_PROXIES": "127.0.0.1",
            "STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "0",
            "STATE_SERVER_LIMITS_REQUESTS_PER_SECOND": "0",
            "STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE": "0",
        }
        self.node_env.update(node_env or {})
        self.balance = balance
        self.pool_size = pool_size
        self.dir = tempfile.mkdtemp(prefix=f"stateserver-faults-{name}.")
        os.chmod(self.dir, 0o755)
        self.pg_dir = os.path.join(self.dir, "pg")
        self.pg_url = ""
        self.pg_port = 0
        self.loop = ProxyLoop()
        self.nodes = [Node(self, i) for i in range(nodes)]
        self.nginx: Optional[subprocess.Popen] = None
        self.nginx_port: Optional[int] = None
        self.closed = False
        _live.add(self)

    # -- start ------------------------------------------------------------------------------------

    def start(self) -> "Cluster":
        self._pg("ensure-user")  # the test user (as root), once, before any server starts
        self.pg_url = self._pg("start", self.pg_dir, "--watch", str(os.getpid())).strip().splitlines()[-1]
        self.pg_port = int(re.search(r"@127\.0\.0\.1:(\d+)/", self.pg_url).group(1))
        for node in self.nodes:
            node.pg_proxy = Proxy(self.loop, self.pg_port, f"{node.name}->pg", postgres=True).start()
        # The first node creates the schema; the others start together after it.
        for node in self.nodes:
            node.start()
            node.front = Proxy(self.loop, node.port, f"->{node.name}").start()
        self._start_nginx()
        return self

    def _pg(self, *args: str) -> str:
        r = subprocess.run(["bash", PG_SCRIPT, *args], capture_output=True, text=True, timeout=90)
        if r.returncode != 0:
            raise RuntimeError(f"postgres-test-server.sh {args[0]}: {r.stderr.strip()[-800:]}")
        return r.stdout

    def _start_nginx(self) -> None:
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.nginx_port = s.getsockname()[1]
        s.close()
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        internal_port = s.getsockname()[1]  # the internal listener (/metrics, /v1/admin/...)
        s.close()
        prefix = os.path.join(self.dir, "nginx")
        os.makedirs(os.path.join(prefix, "logs"), exist_ok=True)
        os.makedirs(os.path.join(prefix, "tmp"), exist_ok=True)
        # hash: by session id (issue 15 item 2: `hash $stateserver_session consistent`, the
        # template's own map); round_robin: nginx's default.
        balance = {"hash": "hash", "round_robin": "round-robin"}[self.balance]
        conf = subprocess.run(["bash", os.path.join(REPO, "deploy", "nginx", "render.sh"), "--main",
                               "--balance", balance, "--listen", f"127.0.0.1:{self.nginx_port}",
                               "--internal-listen", f"127.0.0.1:{internal_port}",
                               # the harness is one address standing for many clients
                               "--connections-per-address", "1000000"]
                              + [f"127.0.0.1:{n.front.port}" for n in self.nodes],
                              capture_output=True, text=True, check=True).stdout
        with open(os.path.join(prefix, "nginx.conf"), "w") as f:
            f.write(conf)
        self.nginx = subprocess.Popen([NGINX, "-p", prefix, "-c", os.path.join(prefix, "nginx.conf"), "-g", "daemon off;"],
                                      stdout=subprocess.DEVNULL, stderr=open(os.path.join(prefix, "error.log"), "w"),
                                      stdin=subprocess.DEVNULL, preexec_fn=_die_with_us(signal.SIGTERM))

    async def wait_ready(self, nodes=None, timeout: float = 60.0) -> None:
        nodes = nodes if nodes is not None else [n for n in self.nodes if n.alive() and not n.paused]
        deadline = time.monotonic() + timeout
        pending = {n.name: n.port for n in nodes}
        if self.nginx is not None:
            pending["nginx"] = self.nginx_port
        while pending:
            for name, port in list(pending.items()):
                try:
                    r = await http.request(port, "GET", "/readyz", timeout=3)
                    if r.status == 200:
                        del pending[name]
                except (http.Timeout, http.Broken):
                    pass
            if not pending:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready within {timeout}s: {sorted(pending)}; "
                                     + "; ".join(f"{n.name}: {n.log_tail(3)}" for n in nodes if n.name in pending))
            await asyncio.sleep(0.1)

    # -- PostgreSQL -------------------------------------------------------------------------------

    def sql(self, statement: str) -> list[list[str]]:
        out = self._pg("sql", self.pg_dir, "stateserver_test", statement)
        return [line.split("|") for line in out.splitlines() if line.strip()]

    def pg_stop(self) -> None:
        self._pg("stop", self.pg_dir)

    def pg_start(self) -> None:
        self._pg("start", self.pg_dir)

    def pg_facts(self, sessions) -> dict:
        """head_seq, each store's head and the journal's seqs, per session, read directly."""
        out = {}
        for s in sessions:
            sid = s.id if hasattr(s, "id") else s
            head = self.sql(f"SELECT head_seq FROM state_sessions WHERE id = '{sid}'")
            stores = self.sql(f"SELECT feature, version FROM state_stores WHERE session = '{sid}'")
            seqs = self.sql(f"SELECT seq FROM state_changes WHERE session = '{sid}' ORDER BY seq")
            out[sid] = {"head_seq": int(head[0][0]) if head else None,
                        "stores": {f: int(v) for f, v in stores},
                        "seqs": [int(r[0]) for r in seqs]}
        return out

    def diagnose(self) -> str:
        """What PostgreSQL's sessions are doing (for a failure message)."""
        try:
            rows = self.sql("SELECT pid, state, wait_event_type, coalesce(wait_event, ''), "
                            "round(extract(epoch FROM now() - xact_start)::numeric, 1), left(query, 60) "
                            "FROM pg_stat_activity WHERE datname = 'stateserver_test' AND pid <> pg_backend_pid() "
                            "ORDER BY xact_start NULLS LAST")
            return "\n".join(" | ".join(r) for r in rows)
        except Exception as e:  # PostgreSQL down
            return f"(no diagnosis: {e})"

    def rows_left(self, sid: str) -> dict:
        left = {}
        for table, column in (("state_sessions", "id"), ("state_changes", "session"), ("state_stores", "session"),
                              ("state_bases", "session"), ("state_keys", "session")):
            left[table] = int(self.sql(f"SELECT count(*) FROM {table} WHERE {column} = '{sid}'")[0][0])
        return left

    # -- stop -------------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        _live.discard(self)
        for node in self.nodes:
            try:
                node.kill()
            except Exception:
                pass
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGTERM)
            try:
                self.nginx.wait(10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait(5)
        for node in self.nodes:
            for p in (node.pg_proxy, node.front):
                if p is not None:
                    p.close()
        self.loop.stop()
        try:
            self._pg("destroy", self.pg_dir)
        except Exception:
            pass
        if os.environ.get("FAULTS_KEEP") == "1":
            print(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
