"""A simulated fleet for bench/fleet_scale.py: N nodes' agents (the real AgentService, one per
node), 64 to a host process, each host reached over a unix socket, and a job of N nodes whose ranks print
per-rank step lines, with real processes where a fault needs one.

Two programs and one transport:

- ``python bench/fleetsim.py agents --first I --count C --socket S --state DIR``: one
  AgentService per node (``node-I`` …, each its own registry, log tail and dead-man's switch;
  a thousand agents' threads in one interpreter queue for its one lock for minutes), serving
  JSON lines ``{"id", "node", "method", "payload"}`` on one connection, calls answered on a
  pool of threads (one node's calls one at a time, as one agent would take them). The
  controller's CPU is then its own process's: the agents' work is not counted in it.
- ``python bench/fleetsim.py job --nodes N --dir DIR``: the job. Each node has a launcher
  (``DIR/fleetnode``, a copy of dash, so kill-node's climb from a rank stops at it) with
  ``--real`` rank processes under it (``sleep``; pid files for rank discovery) and
  ``--ranks`` ranks in all, every one of which prints ``step=S rank=R loss=L`` to its node's
  log every ``--step-s``; rank 0 saves every ``--ckpt-every`` steps. A rank or launcher that
  dies is noticed through a pidfd (no polling), as an elastic agent notices a worker: the job
  prints the failure, stops stepping, restarts after ``--restart-s`` (the lost node's
  launcher and ranks started again), restores its last save and steps on from it.
- :class:`SimNodes`: the controller's side, a :class:`drillbit.transport.nodes.Nodes` whose
  clients send over that socket.

Nothing here judges anything: the drill loop, the probes, the checks and the reports are
drillbit's own.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import contextlib

ROOT = Path(__file__).resolve().parents[1]


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def node_name(i: int) -> str:
    return f"node-{i}"


# --- the agents' host ------------------------------------------------------------------------
def without_guardians() -> None:
    """Arm each agent's switch without starting its guardian process. On a fleet every node
    starts its own guardian (a Python process watching the controller) on its own cores; a
    thousand of them started on this machine's two would measure this machine, not the
    controller. The switch itself (no heartbeat for ``deadman_s``: heal) stays the agent's."""
    from drillbit.agent.node import NodeAgent

    def arm(self: Any, watch: Any, job_grace_s: float = 0.0, offset_s: float = 0.0,
            deadman_s: float | None = None) -> None:
        with self._lock:
            self._armed = {"job_grace_s": job_grace_s, "offset_s": offset_s, "watch": watch.model_dump(),
                           **({"deadman_s": deadman_s} if deadman_s is not None else {})}
            self._save()

    NodeAgent.arm = arm  # type: ignore[method-assign]


def serve_agents(first: int, count: int, sock_path: str, state: str, workers: int, guardians: bool,
                 tail_poll: float) -> None:
    import functools

    from drillbit.agent import service as service_mod
    from drillbit.agent.service import AgentService

    raise_fd_limit()
    if not guardians:
        without_guardians()
    # each agent's log tail reads its files every tail_poll seconds (drillbit's own: 0.1 s); a
    # thousand tails at 10 reads a second are a core of this machine, the nodes' work, not
    # the controller's
    service_mod.LogTail = functools.partial(service_mod.LogTail, poll=tail_poll)  # type: ignore[misc]
    services = {node_name(i): AgentService(node_name(i), state, node_id=node_name(i))
                for i in range(first, first + count)}
    # the fault plugins loaded before the host says it is ready, as a real agent has them: its
    # greeting (``drillbit.agent serve`` answers ``info`` as it starts) loads them on its own
    # node's cores before the controller's handshake; loaded at the first ``info`` instead,
    # 16 hosts' 0.17 CPU-s each landed inside the handshake's measurement
    from drillbit.faults import registry as fault_registry

    fault_registry()
    locks = {n: threading.Lock() for n in services}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(sock_path)
    server.listen(1)
    print("ready", flush=True)
    conn, _ = server.accept()
    out_lock = threading.Lock()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent")

    def reply(msg_id: int, body: dict) -> None:
        data = (json.dumps({"id": msg_id, **body}) + "\n").encode()
        with out_lock:
            conn.sendall(data)

    def handle(msg: dict) -> None:
        node, method = msg["node"], msg["method"]
        try:
            with locks[node]:
                if method == "_shutdown":
                    services[node].shutdown()
                    result: Any = None
                else:
                    result = services[node].dispatch(method, msg["payload"])
            if msg["id"] >= 0:
                reply(msg["id"], {"result": result})
        except Exception as exc:  # noqa: BLE001 — the transport's failure goes back to the caller
            if msg["id"] >= 0:
                reply(msg["id"], {"error": f"{exc.__class__.__name__}: {exc}"})

    with conn, conn.makefile("rb") as lines:
        for line in lines:
            msg = json.loads(line)
            if msg["method"] == "heartbeat" and msg["id"] < 0:  # a beat queues behind nothing (it sets a time)
                services[msg["node"]].dispatch("heartbeat", msg["payload"])
            else:
                pool.submit(handle, msg)
    for service in services.values():  # the controller went away: nothing a job left outlives it
        service.shutdown()
    pool.shutdown(wait=False)


# --- the controller's side -------------------------------------------------------------------
class Mux:
    """One connection to the agents' host; calls from any thread, answered out of order."""

    def __init__(self, sock_path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sock_path)
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, Future] = {}
        self.sent = 0
        self._reader = threading.Thread(target=self._read, name="fleetsim-mux", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with self.sock.makefile("rb") as lines:
            for line in lines:
                msg = json.loads(line)
                future = self._waiting.pop(msg["id"], None)
                if future is not None:
                    future.set_result(msg)
        for future in list(self._waiting.values()):
            future.set_result({"error": "the agents' host closed the connection"})

    def call(self, node: str, method: str, payload: dict, timeout: float, wait: bool = True) -> Any:
        future: Future = Future()
        with self._lock:
            msg_id = self._next if wait else -1
            self._next += 1
            if wait:
                self._waiting[msg_id] = future
            self.sock.sendall((json.dumps({"id": msg_id, "node": node, "method": method,
                                           "payload": payload}) + "\n").encode())
            self.sent += 1
        if not wait:
            return None
        msg = future.result(timeout=timeout)
        if "error" in msg:
            raise ConnectionError(msg["error"])
        return msg["result"]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def sim_nodes_class() -> Any:
    """SimNodes, made when drillbit is importable (the job program does not import it)."""
    from drillbit.transport.client import AgentClient
    from drillbit.transport.nodes import Nodes

    class SimClient(AgentClient):
        def __init__(self, node: str, mux: Mux) -> None:
            super().__init__(node)
            self.mux = mux

        def _send(self, method: str, payload: dict[str, Any], timeout: float) -> Any:
            return self.mux.call(self.node, method, payload, timeout)

        def _post(self, method: str, payload: dict[str, Any]) -> None:
            self.mux.call(self.node, method, payload, 5.0, wait=False)

        def close(self) -> None:
            self.mux.call(self.node, "_shutdown", {}, 60.0)

    class SimNodes(Nodes):
        """``nodes`` simulated nodes whose agents run in the host process at ``sock_path``
        (started by the bench), all on this machine."""

        engine = "process"
        local = True

        def __init__(self, run_dir: Path, cluster_name: str, hosts: list[tuple[int, int, str]], *,
                     deadman_s: float = 5.0, job_grace_s: float = 30.0) -> None:
            super().__init__(run_dir, cluster_name, deadman_s=deadman_s, job_grace_s=job_grace_s)
            self.hosts_at = hosts  # (first node, how many, socket) of each agents' host
            self.muxes: list[Mux] = []

        def connect(self) -> dict[str, AgentClient]:
            clients: dict[str, AgentClient] = {}
            for first, count, sock in self.hosts_at:
                mux = Mux(sock)
                self.muxes.append(mux)
                clients.update({node_name(i): SimClient(node_name(i), mux) for i in range(first, first + count)})
            return clients

        def close(self) -> None:
            try:
                super().close()
            finally:
                for mux in self.muxes:
                    mux.close()

    return SimNodes


# --- the job ---------------------------------------------------------------------------------
class FleetJob:
    def __init__(self, args: argparse.Namespace) -> None:
        self.n, self.ranks, self.real = args.nodes, args.ranks, args.real
        if not 1 <= args.real <= args.ranks:
            raise SystemExit(f"--real {args.real}: between 1 and --ranks ({args.ranks}), the ranks a node has")
        self.step_s, self.ckpt_every, self.restart_s = args.step_s, args.ckpt_every, args.restart_s
        self.monitor_s = args.monitor_s
        self.dir = Path(args.dir)
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.dir / "pids").mkdir(exist_ok=True)
        self.launcher_bin = self.dir / "fleetnode"
        shutil.copy(shutil.which("dash") or "/bin/sh", self.launcher_bin)
        self.logs = [open(self.dir / "logs" / f"{node_name(i)}.log", "a", buffering=1 << 16)  # noqa: SIM115
                     for i in range(self.n)]
        self.launchers: dict[int, subprocess.Popen] = {}
        self.rank_pids: dict[int, int] = {}  # global rank -> pid, the real ones
        # every rank process ever started, by pid and start time, ended at exit whatever became of
        # its launcher (a pid alone may have been reused by then)
        self.every_pid: set[tuple[int, float]] = set()
        self.watch: dict[int, tuple[str, int]] = {}  # pidfd -> ("rank", rank) | ("node", i)
        self.poller = select.poll()
        self.attempt = 0
        self.step = 0
        self.saved = 0
        self.lines = 0
        self.stopping = False

    def start_node(self, i: int) -> None:
        parts = []
        for local in range(self.real):
            rank = i * self.ranks + local
            pid_file = self.dir / "pids" / node_name(i) / f"{rank}.json"
            body = '{"pid": %s, "rank": ' + str(rank) + ', "node_id": "' + node_name(i) + '"}'
            parts.append(f"RANK={rank} sleep 1000000 & printf '{body}' $! > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}")
        (self.dir / "pids" / node_name(i)).mkdir(exist_ok=True)
        script = "; ".join(parts) + "; wait"
        proc = subprocess.Popen([str(self.launcher_bin), "-c", script, "fleetnode"], stdin=subprocess.DEVNULL)
        self.launchers[i] = proc
        self._watch(proc.pid, ("node", i))

    def _watch(self, pid: int, what: tuple[str, int]) -> None:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        self.watch[fd] = what
        self.poller.register(fd, select.POLLIN)

    def await_ranks(self, nodes: list[int]) -> None:
        """The pid files of the nodes just started, read back (the ranks' pids, watched)."""
        for i in nodes:
            for local in range(self.real):
                rank = i * self.ranks + local
                pid_file = self.dir / "pids" / node_name(i) / f"{rank}.json"
                for _ in range(2000):
                    if pid_file.exists():
                        break
                    time.sleep(0.005)
                pid = json.loads(pid_file.read_text())["pid"]
                self.rank_pids[rank] = pid
                with contextlib.suppress(psutil.Error):
                    self.every_pid.add((pid, psutil.Process(pid).create_time()))
                self._watch(pid, ("rank", rank))

    def write_step(self) -> None:
        self.step += 1
        for i, log in enumerate(self.logs):
            base = i * self.ranks
            log.write("".join(f"step={self.step} rank={base + r} loss={1.0 / self.step:.5f}\n"
                              for r in range(self.ranks)))
            self.lines += self.ranks
        if self.step % self.ckpt_every == 0:
            self.saved = self.step
            self.logs[0].write(f"saved step={self.step} path={self.dir}/ckpt/step-{self.step}\n")
        for log in self.logs:
            log.flush()

    def dead(self, timeout_s: float) -> list[tuple[str, int]]:
        out = []
        for fd, _ in self.poller.poll(max(0, int(timeout_s * 1000))):
            what = self.watch.pop(fd)
            self.poller.unregister(fd)
            os.close(fd)
            out.append(what)
        return out

    def recover(self, dead: list[tuple[str, int]]) -> None:
        """An elastic agent's restart: every node whose rank or launcher died is started again
        (its surviving processes stopped first), the last save restored."""
        node_of = {("rank", r): r // self.ranks for _, r in dead if _ == "rank"}
        nodes = sorted({i for kind, i in dead if kind == "node"} | set(node_of.values()))
        for kind, x in dead:
            if kind == "rank":
                self.logs[0].write(f"worker failed rank={x} node={node_name(x // self.ranks)}\n")
        self.logs[0].flush()
        time.sleep(self.restart_s)
        for i in nodes:
            self.stop_node(i)
        self.attempt += 1
        self.logs[0].write(f"restarting attempt={self.attempt}\n")
        self.logs[0].flush()
        for i in nodes:
            self.start_node(i)
        self.await_ranks(nodes)
        self.step = self.saved
        self.logs[0].write(f"restored step={self.saved} path={self.dir}/ckpt/step-{self.saved}\n")
        self.logs[0].flush()

    def stop_node(self, i: int) -> None:
        for local in range(self.real):
            pid = self.rank_pids.pop(i * self.ranks + local, None)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        proc = self.launchers.pop(i, None)
        if proc is not None:
            proc.kill()
            proc.wait()
        for fd, what in list(self.watch.items()):
            if what == ("node", i) or (what[0] == "rank" and what[1] // self.ranks == i):
                self.poller.unregister(fd)
                os.close(fd)
                del self.watch[fd]
        for f in (self.dir / "pids" / node_name(i)).glob("*.json"):
            f.unlink()

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        for i in range(self.n):
            self.start_node(i)
        self.await_ranks(list(range(self.n)))
        (self.dir / "ready").write_text(json.dumps({"pid": os.getpid()}))
        next_at = time.monotonic()
        try:
            while not self.stopping:
                dead = self.dead(max(0.0, next_at - time.monotonic()))
                if dead:
                    # an elastic agent's monitor interval: the deaths of one fault, one restart. It
                    # is wider than a fault's fan-out over 64 nodes (442 ms at 1,024 nodes): at 0.5 s
                    # the 64-rank kill came as two restarts (docs/fleet-scale.md)
                    settle = time.monotonic() + self.monitor_s
                    while time.monotonic() < settle:
                        dead += self.dead(settle - time.monotonic())
                    self.recover(dead)
                    next_at = time.monotonic()
                    continue
                if time.monotonic() >= next_at:
                    self.write_step()
                    next_at += self.step_s
        finally:
            for i in list(self.launchers):
                self.stop_node(i)
            for pid, started in self.every_pid:  # a rank whose launcher was killed under it is init's child now
                with contextlib.suppress(psutil.Error):
                    proc = psutil.Process(pid)
                    if proc.create_time() == started:
                        proc.kill()
            (self.dir / "lines").write_text(str(self.lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("agents")
    a.add_argument("--first", type=int, default=0, help="the first node this host serves")
    a.add_argument("--count", type=int, required=True, help="how many nodes this host serves")
    a.add_argument("--socket", required=True)
    a.add_argument("--state", required=True)
    a.add_argument("--workers", type=int, default=64)
    a.add_argument("--guardians", action="store_true", help="start each agent's guardian process (a node's own)")
    a.add_argument("--tail-poll", type=float, default=0.1, help="seconds between each agent's reads of its logs")
    j = sub.add_parser("job")
    j.add_argument("--nodes", type=int, required=True)
    j.add_argument("--dir", required=True)
    j.add_argument("--ranks", type=int, default=8, help="ranks per node (each prints its own step lines)")
    j.add_argument("--real", type=int, default=1, help="real rank processes per node (fault targets)")
    j.add_argument("--step-s", type=float, default=2.0)
    j.add_argument("--ckpt-every", type=int, default=5)
    j.add_argument("--restart-s", type=float, default=1.0)
    j.add_argument("--monitor-s", type=float, default=2.0,
                   help="deaths within this long of the first are one failure, one restart")
    args = ap.parse_args()
    if args.cmd == "agents":
        os.nice(10)  # the nodes' work yields to the controller's, which is what is measured
        serve_agents(args.first, args.count, args.socket, args.state, args.workers, args.guardians, args.tail_poll)
    else:
        os.nice(10)
        raise_fd_limit()
        FleetJob(args).run()


if __name__ == "__main__":
    sys.exit(main())
