"""The one agent API, per transport: an unknown method, a malformed request and a version
mismatch are refused with a clear error, and the agent answers the next call as before.

In-process (AgentService through the client), JSON lines (a real ``python -m drillbit.agent
serve`` process on pipes), SSH (the same over a real sshd on 127.0.0.1) and Ray (an agent
actor on the embedded cluster, marked slow)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import drillbit
from drillbit.agent import api
from drillbit.agent.service import AgentService
from drillbit.spec.config import SshHost
from drillbit.transport.client import AgentClient, AgentError, VersionMismatch
from drillbit.transport.inprocess import InProcessClient
from tests.integration.cli import drill_cli
from tests.integration.sshd import SSHD, start_sshd, stop_sshd

OTHER = "0.0.0-other"


def refuses_bad_calls_and_lives_on(client: AgentClient) -> None:
    with pytest.raises(AgentError, match=r"unknown-method: unknown method 'launch_anything'.*serves: active, arm"):
        client.request_raw("launch_anything", {})
    with pytest.raises(AgentError, match=r"bad-request: malformed inject request: target: Field required"):
        client.request_raw("inject", {"fault": "kill-rank"})
    with pytest.raises(AgentError, match=r"bad-request: malformed find_ranks request: (discovery|attach_pid)"):
        client.request_raw("find_ranks", {"discovery": {"cmdline": "x"}, "attach_pid": "not-a-pid", "extra": 1})
    info = client.handshake()  # and the agent lives on
    assert info.version == drillbit.__version__ and info.protocol == api.PROTOCOL
    assert "kill-rank" in info.faults


def _raw(self: AgentClient, method: str, payload: dict) -> None:
    """Send what a careless or hostile caller would, past the client's own models."""
    raw = self._send(method, payload, 30.0)
    envelope = api.Envelope.model_validate(raw)
    if envelope.error is not None:
        raise AgentError(f"{envelope.error.kind}: {envelope.error.message}")


AgentClient.request_raw = _raw  # type: ignore[attr-defined]


# --- in-process --------------------------------------------------------------------------
def test_in_process_agent_refuses_bad_calls(tmp_path):
    client = InProcessClient(AgentService("n0", tmp_path))
    try:
        refuses_bad_calls_and_lives_on(client)
        assert AgentService("n0", tmp_path).dispatch(None, None)["error"]["kind"] == "unknown-method"
    finally:
        client.close()


def test_in_process_version_mismatch_is_refused_naming_both(tmp_path):
    client = InProcessClient(AgentService("n0", tmp_path, version=OTHER))
    try:
        with pytest.raises(VersionMismatch) as exc:
            client.handshake()
        assert OTHER in str(exc.value) and drillbit.__version__ in str(exc.value)
        assert client.request("clock").t > 0  # refused, not dead
    finally:
        client.close()


def test_a_busy_lease_crosses_the_wire_as_its_own_kind_naming_the_holder(tmp_path):
    """#56: on SSH the lease is held by the first host's agent, and a busy one came back as a
    `failed` call (exit 5, "harness"). It is `busy`, raised as a LeaseError that names the
    holder (exit 2), and `--wait` retries it through the agent until the holder lets go."""
    from drillbit.core.errors import LeaseError
    from drillbit.core.lease import Lease, LeaseWait, take

    client = InProcessClient(AgentService("n0", tmp_path))
    holder = Lease("hosts", "game-day drill by alice")
    holder.acquire()
    try:
        raw = client._send("lease_acquire", {"cluster": "hosts", "holder": "drill b"}, 30.0)
        assert raw["error"]["kind"] == "busy" and "is held by game-day drill by alice (pid" in raw["error"]["message"]
        with pytest.raises(LeaseError, match=r"is held by game-day drill by alice \(pid \d+ on .*, since .*\); wait "
                                             r"for it to finish \(--wait\)"):
            client.lease_acquire("hosts", "drill b")
        holder.release()
        take(lambda: client.lease_acquire("hosts", "drill b"), LeaseWait(limit=60.0), lambda _text: None)
        with pytest.raises(LeaseError, match="is held by drill b"):  # the agent holds it now
            Lease("hosts", "drill c").acquire()
    finally:
        holder.release()
        client.lease_release()
        client.close()


def test_drill_against_agents_of_another_version_exits_2_before_launching(tmp_path):
    config = tmp_path / "drill.yaml"
    config.write_text(json.dumps({"clusters": {"old": {"engine": "process"}}}))
    here = Path(__file__).parent / "drills"
    proc = drill_cli("run", str(here / "kill-rank-fast.yaml"), "--cluster", "old", "--config", str(config),
                     "--reports", str(tmp_path / "r"), "--json",
                     env={**os.environ, "DRILLBIT_TEST_AGENT_VERSION": OTHER})  # a test aid, not a setting
    assert proc.returncode == 2, proc.stdout + proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["error_kind"] == "config" and OTHER in payload["error"] and drillbit.__version__ in payload["error"]
    kinds = [json.loads(line)["kind"] for line in next((tmp_path / "r").glob("*/history.jsonl")).read_text().splitlines()]
    assert "job.launch" not in kinds and "Traceback" not in proc.stderr


# --- JSON lines on pipes ---------------------------------------------------------------------
class PipeClient(AgentClient):
    """The SSH transport's wire format, on a local process's pipes."""

    def __init__(self, tmp_path: Path, version: str | None = None) -> None:
        super().__init__("pipe")
        cmd = [sys.executable, "-m", "drillbit.agent", "serve", "--node", "pipe", "--state-dir", str(tmp_path)]
        if version:
            cmd += ["--pretend-version", version]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.greeting = json.loads(self.proc.stdout.readline())
        self.next = 1

    def line(self, text: str) -> dict:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def _send(self, method, payload, timeout):
        rid, self.next = self.next, self.next + 1
        reply = self.line(json.dumps({"id": rid, "method": method, "payload": payload}))
        assert reply.pop("id") == rid
        return reply

    def close(self) -> None:
        self.proc.stdin.write(json.dumps({"id": 0, "method": "exit"}) + "\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


def test_json_lines_agent_refuses_bad_lines_and_calls(tmp_path):
    client = PipeClient(tmp_path)
    try:
        assert client.greeting["ok"]["node"] == "pipe"
        bad = client.line("this is not json")
        assert bad["id"] is None and bad["error"]["kind"] == "bad-request" and "not JSON" in bad["error"]["message"]
        assert client.line('["a", "list"]')["error"]["kind"] == "bad-request"
        assert client.line('{"id": 7, "method": 12}')["id"] == 7
        refuses_bad_calls_and_lives_on(client)
    finally:
        client.close()


def test_json_lines_version_mismatch(tmp_path):
    client = PipeClient(tmp_path, version=OTHER)
    try:
        with pytest.raises(VersionMismatch, match=OTHER):
            client.handshake()
        assert client.request("clock").t > 0
    finally:
        client.close()


# --- SSH ---------------------------------------------------------------------------------------
@pytest.mark.skipif(not Path(SSHD).exists(), reason="needs OpenSSH's sshd (.ci/run installs openssh-server)")
def test_ssh_agent_refuses_bad_calls_and_other_versions(tmp_path):
    from drillbit.transport.ssh import SshAgentClient

    server = start_sshd(tmp_path / "sshd")
    try:
        host = SshHost(name="h0", host="127.0.0.1", port=server.port, user=server.user, key_filename=str(server.key),
                       python=sys.executable, state_dir=str(tmp_path / "agent"))
        client = SshAgentClient(host, str(server.known_hosts))
        try:
            refuses_bad_calls_and_lives_on(client)
        finally:
            client.close()
        other = SshAgentClient(host, str(server.known_hosts), version=OTHER)
        try:
            with pytest.raises(VersionMismatch, match=OTHER):
                other.handshake()
            assert other.request("clock").t > 0
        finally:
            other.close()
    finally:
        stop_sshd(server)


# --- Ray ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_ray_agent_actor_refuses_bad_calls_and_other_versions(tmp_path):
    import psutil

    from drillbit.core.proc import ProcRef
    from drillbit.transport.ray import RayNodes

    nodes = RayNodes(tmp_path, "api-test", address=None, nodes=1, version=OTHER)
    try:
        with pytest.raises(VersionMismatch, match=OTHER):
            nodes.start(ProcRef.of(psutil.Process()))
        [client] = nodes.clients.values()
        refuses_bad_calls_and_lives_on_except_version(client)
    finally:
        nodes.close()


def refuses_bad_calls_and_lives_on_except_version(client: AgentClient) -> None:
    with pytest.raises(AgentError, match="unknown-method"):
        client.request_raw("__init__", {})
    with pytest.raises(AgentError, match="bad-request"):
        client.request_raw("stop_job", {"timeout": -1})
    assert client.request("clock").t > 0
