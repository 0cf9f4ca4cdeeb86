"""A fake transport and a fake job, for driving the whole drill loop in well under a second.

Locust's model: the coordinator (here the drill loop, ``Nodes`` and ``AgentClient``) is the
real code; only the far end is fake. :class:`FakeAgent` serves the agent API's method table
(the same request and reply models, through JSON) over a simulated job instead of real
processes; :class:`FakeJob` makes steps on a timer and, once a rank is killed, detects,
restarts and restores after set delays (or never, when ``recovers=False``). Each method can
be told to raise, to show what every phase does when its call fails. Real-process tests of
the same loop are in tests/integration.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from drillbit.agent import api
from drillbit.faults.base import Evidence, Handle, HealReport, PlanStep
from drillbit.core.history import History
from drillbit.transport.nodes import Nodes
from drillbit.core.proc import ProcRef
from drillbit.spec.config import JobProfile, LaunchSpec, RankDiscovery, cluster_spec
from drillbit.spec.models import DrillSpec
from drillbit.transport.client import AgentClient

import drillbit


class FakeJob:
    """Four ranks stepping every ``step_s``; a checkpoint every ``ckpt_every`` steps."""

    def __init__(self, step_s: float = 0.01, ckpt_every: int = 5, detect_s: float = 0.05, restart_s: float = 0.1,
                 recovers: bool = True) -> None:
        self.step_s, self.ckpt_every = step_s, ckpt_every
        self.detect_s, self.restart_s, self.recovers = detect_s, restart_s, recovers
        self.events: list[tuple[float, str, dict]] = []
        self.step = 0
        self.down_since: float | None = None
        self.exit_code: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _emit(self, kind: str, **data: Any) -> None:
        with self._lock:
            self.events.append((time.time(), kind, data))

    def _run(self) -> None:
        detected = restarted = False
        while not self._stop.wait(self.step_s):
            if self.down_since is None:
                self.step += 1
                self._emit("step", n=self.step)
                continue
            down = time.time() - self.down_since
            if not detected and down >= self.detect_s:
                detected = True
                self._emit("detect", by="fake-launcher")
            if self.recovers and not restarted and down >= self.restart_s:
                restarted = True
                self._emit("restart", attempt=1)
                self.step = self.step // self.ckpt_every * self.ckpt_every
                self._emit("restore", step=self.step, path=f"ckpt/step_{self.step}")
                self.down_since = None
                detected = restarted = False

    def kill(self) -> None:
        self.down_since = time.time()

    def exit_at(self, step: int, code: int) -> None:
        """End the job with ``code`` once it has made ``step`` steps (a job that gives up on its own)."""
        def watch() -> None:
            while self.step < step:
                time.sleep(0.005)
            self.exit_code = code
            self._stop.set()

        threading.Thread(target=watch, daemon=True).start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=2)
        if self.exit_code is None:
            self.exit_code = -15
        return self.exit_code

    def drain(self, start: int) -> list[tuple[float, str, dict]]:
        with self._lock:
            return self.events[start:]


class FakeAgent:
    """The agent API's method table over a FakeJob. ``fail_on``: methods that raise;
    ``heal_hangs``: heal sleeps this long first (``forever`` until released); ``after_job``:
    its handles say their heal waits for the job to stop."""

    def __init__(self, node: str, job: FakeJob, *, fail_on: set[str] | None = None, heal_hangs: float = 0.0,
                 heal_hangs_times: int = 1, version: str | None = None, after_job: bool = False) -> None:
        self.node, self.job = node, job
        self.after_job = after_job  # its faults heal once the job is stopped (restore_after)
        self.fail_on = fail_on or set()
        self.heal_hangs, self.heal_hangs_left = heal_hangs, heal_hangs_times
        self.version = version or drillbit.__version__
        self.active: dict[str, Handle] = {}
        self.calls: list[str] = []
        self.launched = self.stopped = False
        self.release = threading.Event()

    def dispatch(self, method: Any, payload: Any) -> dict:
        parsed = api.parse_request(method, payload)
        if isinstance(parsed, api.RemoteError):
            return api.Envelope(error=parsed).model_dump(mode="json")
        spec, request = parsed
        self.calls.append(method)
        try:
            if method in self.fail_on:
                raise RuntimeError(f"fake failure in {method}")
            reply = getattr(self, f"_{method}")(request)
        except Exception as exc:
            return api.Envelope(error=api.RemoteError(kind="failed",
                message=f"{type(exc).__name__}: {exc}")).model_dump(mode="json")
        assert isinstance(reply, spec.reply)
        return api.Envelope(ok=reply.model_dump(mode="json")).model_dump(mode="json")

    def ranks(self) -> list[ProcRef]:
        return [ProcRef(pid=10_000 + r, start_time=1.0, rank=r, node=self.node) for r in range(4)]

    # the method table
    def _info(self, req):
        return api.Info(node=self.node, pid=1, host="fake", t=time.time(), version=self.version,
                        protocol=api.PROTOCOL, faults=sorted(__import__("drillbit.faults", fromlist=["x"]).registry()))
    def _clock(self, req): return api.Clock(t=time.time())
    def _heartbeat(self, req): return api.Clock(t=time.time())
    def _arm(self, req): return api.Empty()
    def _disarm(self, req): return api.Empty()
    def _find_ranks(self, req): return api.Ranks(ranks=self.ranks())

    def _launch(self, req):
        self.launched = True
        self.job.start()
        return api.Launched(proc=ProcRef(pid=9_999, start_time=1.0, node=self.node))

    def _job_status(self, req): return api.JobStatus(code=self.job.exit_code)

    def _stop_job(self, req):
        self.stopped = True
        return api.JobStatus(code=self.job.stop())

    def _plan(self, req):
        return api.Planned(step=PlanStep(node=self.node, pid=req.target.pid, rank=req.target.rank, action="fake"))

    def _inject(self, req):
        handle = Handle(fault=req.fault, target=req.target, params=req.params, state={"sent": True},
                        after_job=self.after_job)
        self.active[f"{req.target.pid}"] = handle
        self.job.kill()
        return api.Injected(handle=handle)

    def _confirm(self, req): return api.Confirmed(evidence=Evidence(what="fake rank gone"))

    # the batched calls, as the real service answers them: each target through the one-target
    # method (its fail_on included), to the first failure
    def _one(self, method: str, payload: dict) -> tuple[dict | None, api.RemoteError | None]:
        envelope = api.Envelope.model_validate(self.dispatch(method, payload))
        return envelope.ok, envelope.error

    def _each(self, method: str, payloads: list[dict], reply: type, field: str) -> list:
        """``method`` once a payload, as the one-target calls answer it; the first error raised."""
        out = []
        for payload in payloads:
            ok, error = self._one(method, payload)
            if error is not None:
                raise RuntimeError(error.message)
            out.append(getattr(reply.model_validate(ok), field))
        return out

    def _plan_all(self, req):
        return api.PlannedAll(steps=self._each("plan", [
            {"fault": req.fault, "target": t.model_dump(mode="json"), "params": req.params} for t in req.targets],
            api.Planned, "step"))

    def _inject_all(self, req):
        handles = []
        for target in req.targets:
            ok, error = self._one("inject", {"fault": req.fault, "target": target.model_dump(mode="json"),
                                             "params": req.params})
            if error is not None:
                return api.InjectedAll(handles=handles, error=error)
            handles.append(api.Injected.model_validate(ok).handle)
        return api.InjectedAll(handles=handles)

    def _confirm_all(self, req):
        return api.ConfirmedAll(evidence=self._each(
            "confirm", [{"handle": h.model_dump(mode="json")} for h in req.handles], api.Confirmed, "evidence"))

    def _heal_all(self, req):
        return api.HealedAll(reports=self._each(
            "heal", [{"handle": h.model_dump(mode="json")} for h in req.handles], api.Healed, "report"))

    def _heal(self, req):
        if self.heal_hangs and self.heal_hangs_left > 0:
            self.heal_hangs_left -= 1
            self.release.wait(self.heal_hangs)
        self.active.pop(f"{req.handle.target.pid}", None)
        return api.Healed(report=HealReport(healed=True, verified=True, detail="fake heal"))

    def _active(self, req): return api.Active(handles=list(self.active.values()))
    def _records(self, req): return api.Records(records=[])
    def _free_port(self, req): return api.Port(port=12345)
    def _lease_acquire(self, req): return api.Empty()
    def _lease_release(self, req): return api.Empty()


class FakeClient(AgentClient):
    def __init__(self, agent: FakeAgent) -> None:
        super().__init__(agent.node)
        self.agent = agent

    def _send(self, method: str, payload: dict, timeout: float) -> Any:
        return json.loads(json.dumps(self.agent.dispatch(method, json.loads(json.dumps(payload)))))


class FakeLease:
    released = False

    def release(self) -> None:
        self.released = True


class FakeNodes(Nodes):
    """A fake transport to one fake agent; its job runs on this machine, as on the in-process engine."""

    heartbeat_s = 0.05
    local = True

    def __init__(self, run_dir: Path, agent: FakeAgent) -> None:
        super().__init__(run_dir, "fake", deadman_s=5.0, job_grace_s=0.0)
        self.agent = agent
        self.lease = FakeLease()
        self.heal_timeout = 0.3

    def connect(self) -> dict[str, AgentClient]:
        return {self.agent.node: FakeClient(self.agent)}

    def acquire(self, holder: str) -> FakeLease:
        return self.lease


class FakeProbe:
    """Moves the fake job's events into the history, as the log probes do for a real job."""

    def __init__(self, history: History, job: FakeJob) -> None:
        self.history, self.job = history, job
        self.seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def explain(self) -> str:
        return ""

    def poll_once(self) -> None:
        for t, kind, data in self.job.drain(self.seen):
            self.seen += 1
            self.history.record("probe:fake", kind, t=t, **data)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.poll_once()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def fake_probes(job: FakeJob):
    return lambda history, profile, logs, values: [FakeProbe(history, job)]


def spec(**overrides: Any) -> DrillSpec:
    data = {"name": "fake-kill", "class": "fail-stop", "summary": "kill-rank on the fake job",
            "fault": {"type": "kill-rank", "targets": {"ranks": [1]}, "trigger": {"at_step": 8}},
            "steady": {"warmup_steps": 3, "timeout": "5s"},
            "observe": {"until_steps_after_recovery": 3, "window": "2s"},
            "slo": {"detect_within": "1s", "first_step_within": "1.5s"},
            "abort": {"max_duration": "10s"}}
    data.update(overrides)
    return DrillSpec.model_validate(data)


CLUSTER = cluster_spec(engine="process")
JOB = JobProfile(launch=LaunchSpec(command=["fake-job"]), ranks=RankDiscovery(cmdline="fake"), logs=["unused.log"])
