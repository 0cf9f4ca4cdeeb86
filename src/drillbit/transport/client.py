"""AgentClient: one node's agent seen from the controller, over any transport.

A transport implements ``_send(method, payload, timeout) -> envelope data`` (and may make
``_post`` fire-and-forget for heartbeats); everything else is here, once: requests are
built from the API's models before they leave, replies are validated into the API's reply
models, errors come back as :class:`AgentError` naming the node, and every time an agent
reports (evidence, heals, the inject time) is moved onto the controller's clock by the
offset measured at the handshake.
"""
from __future__ import annotations

import time
from typing import Any

import drillbit
from drillbit.agent import api
from drillbit.core.errors import ConfigError, DrillError, LeaseError
from drillbit.faults import registry as fault_registry
from drillbit.faults.base import Evidence, Handle, HealReport, PlanStep
from drillbit.core.proc import ProcRef
from drillbit.core.pystacks import RankStack
from drillbit.spec.config import RankDiscovery


class AgentError(DrillError):
    """An agent refused or failed a call."""


class VersionMismatch(AgentError, ConfigError):
    """Controller and agent run different drillbit releases (or fault registries)."""


class AgentConfigError(AgentError, ConfigError):
    """The agent found the job's description wrong for what its node holds (exit 2)."""


class AgentBusy(AgentError, LeaseError):
    """The agent found the cluster's lease held by another drill (exit 2, naming the holder)."""


class AgentClient:
    def __init__(self, node: str) -> None:
        self.node = node
        self.offset = 0.0  # agent clock minus controller clock, seconds
        self.rtt = 0.0
        self._clock_sample: tuple[float, float] | None = None  # (round trip, offset) from the handshake

    # --- the transport -------------------------------------------------------------------
    def _send(self, method: str, payload: dict[str, Any], timeout: float) -> Any:
        raise NotImplementedError

    def _post(self, method: str, payload: dict[str, Any]) -> None:
        """Send without waiting for the answer where the transport allows (heartbeats)."""
        self._send(method, payload, 5.0)

    def close(self) -> None:
        pass

    def request(self, method: str, req: api.Message | None = None, timeout: float = 60.0) -> Any:
        spec = api.METHODS[method]
        req = req if req is not None else spec.request()
        raw = self._send(method, req.model_dump(mode="json"), timeout)
        try:
            envelope = api.Envelope.model_validate(raw)
        except ValueError as exc:
            raise AgentError(f"agent on {self.node}: {method}: an answer that is not an envelope ({exc})") from None
        if envelope.error is not None:
            raise self._error(method, envelope.error)
        return spec.reply.model_validate(envelope.ok or {})

    def _error(self, method: str, error: api.RemoteError) -> Exception:
        """The exception for what the agent answered went wrong."""
        if error.kind == "busy":
            return AgentBusy(error.message)
        cls = (VersionMismatch if "version mismatch" in error.message else
               AgentConfigError if error.kind == "config" else AgentError)
        return cls(f"agent on {self.node}: {method} {error.kind}: {error.message}")

    # --- handshake and clock -------------------------------------------------------------
    def handshake(self, timeout: float = 120.0) -> api.Info:
        """The ready handshake: the agent answers, and runs what the controller runs."""
        t0 = time.time()
        info: api.Info = self.request("info", api.InfoRequest(controller_version=drillbit.__version__), timeout)
        t1 = time.time()
        self._clock_sample = (t1 - t0, info.t - (t0 + t1) / 2)  # the answer carries the agent's clock
        mine = sorted(fault_registry())
        if info.version != drillbit.__version__ or info.protocol != api.PROTOCOL:
            raise VersionMismatch(f"agent on {self.node} runs drillbit {info.version} (protocol {info.protocol}), "
                                  f"the controller drillbit {drillbit.__version__} (protocol {api.PROTOCOL}); "
                                  "install the same version on both")
        if info.faults != mine:
            raise VersionMismatch(f"agent on {self.node} knows faults {info.faults}, the controller {mine}; "
                                  "install the same fault plugins on both")
        return info

    def measure_offset(self, samples: int = 8, good_rtt: float = 0.002) -> tuple[float, float]:
        """NTP-style: the sample with the smallest round trip gives the offset (within half of
        it). Up to ``samples``, and no more once a second sample came back within ``good_rtt``
        (an offset known to 1 ms: a fleet's handshake makes 2 round trips of it, not 8). The
        handshake's answer, which carries the agent's clock, is the first sample: a handshake
        then takes 3 round trips (info, clock, arm) where it took 4."""
        best, self._clock_sample = self._clock_sample, None  # a second measurement samples afresh
        for i in range(1 if best is not None else 0, samples):
            t0 = time.time()
            remote = self.request("clock", timeout=10.0).t
            t1 = time.time()
            rtt = t1 - t0
            if best is None or rtt < best[0]:
                best = (rtt, remote - (t0 + t1) / 2)
            if i >= 1 and best[0] <= good_rtt:
                break
        assert best is not None
        self.rtt, self.offset = best
        return self.offset, self.rtt

    def local_time(self, t: float) -> float:
        return t - self.offset

    def beat(self) -> None:
        self._post("heartbeat", {})

    # --- typed calls ---------------------------------------------------------------------
    def arm(self, deadman_s: float, job_grace_s: float) -> None:
        self.request("arm", api.Arm(deadman_s=deadman_s, job_grace_s=job_grace_s, offset_s=self.offset), 10.0)

    def disarm(self) -> None:
        self.request("disarm", timeout=15.0)

    def find_ranks(self, discovery: RankDiscovery, attach: ProcRef | None) -> list[ProcRef]:
        return self.request("find_ranks", api.FindRanks(discovery=discovery, attach=attach)).ranks

    def stacks(self, ranks: list[ProcRef]) -> list[RankStack]:
        return self.request("stacks", api.StacksRequest(ranks=ranks), timeout=90.0).stacks

    def launch(self, argv: list[str], env: dict[str, str], cwd: str | None, out_path: str,
               stop_timeout: float) -> api.Launched:
        return self.request("launch", api.Launch(argv=argv, env=env, cwd=cwd, out_path=out_path,
                                                 stop_timeout=stop_timeout))

    def job_status(self) -> int | None:
        return self.request("job_status", timeout=10.0).code

    def stop_job(self, timeout: float) -> int | None:
        return self.request("stop_job", api.StopJob(timeout=timeout), timeout=timeout + 30).code

    def plan(self, fault: str, target: ProcRef, params: dict) -> PlanStep:
        return self.request("plan", api.PlanRequest(fault=fault, target=target, params=params)).step

    def inject(self, fault: str, target: ProcRef, params: dict) -> Handle:
        handle = self.request("inject", api.Inject(fault=fault, target=target, params=params)).handle
        return handle.model_copy(update={"injected_at": self.local_time(handle.injected_at)})

    def confirm(self, handle: Handle) -> Evidence | None:
        evidence = self.request("confirm", api.OfHandle(handle=handle)).evidence
        return None if evidence is None else evidence.model_copy(update={"t": self.local_time(evidence.t)})

    def plan_all(self, fault: str, targets: list[ProcRef], params: dict) -> list[PlanStep]:
        return self.request("plan_all", api.InjectAll(fault=fault, targets=targets, params=params),
                            60.0 * len(targets)).steps

    def inject_all(self, fault: str, targets: list[ProcRef], params: dict) -> tuple[list[Handle], Exception | None]:
        """:meth:`inject` on each target in order, in one round trip: the handles of those it
        reached, and what the first that failed raised (the rest were not tried), or None."""
        reply = self.request("inject_all", api.InjectAll(fault=fault, targets=targets, params=params),
                             60.0 * len(targets))  # each target the time one inject has
        handles = [h.model_copy(update={"injected_at": self.local_time(h.injected_at)}) for h in reply.handles]
        return handles, None if reply.error is None else self._error("inject", reply.error)

    def confirm_all(self, handles: list[Handle]) -> list[Evidence | None]:
        evidence = self.request("confirm_all", api.OfHandles(handles=handles), 60.0 * len(handles)).evidence
        return [None if e is None else e.model_copy(update={"t": self.local_time(e.t)}) for e in evidence]

    def heal(self, handle: Handle, timeout: float = 60.0) -> HealReport:
        report = self.request("heal", api.OfHandle(handle=handle), timeout).report
        return report.model_copy(update={"t": self.local_time(report.t)})

    def heal_all(self, handles: list[Handle], timeout: float = 60.0) -> list[HealReport]:
        """:meth:`heal` on each handle in order, in one round trip (``timeout`` each); a heal that
        failed, or raised on the agent, is its failed report, and the rest were still healed."""
        if not handles:
            return []
        reports = self.request("heal_all", api.OfHandles(handles=handles), timeout * len(handles)).reports
        return [r.model_copy(update={"t": self.local_time(r.t)}) for r in reports]

    def active(self) -> list[Handle]:
        return self.request("active", timeout=15.0).handles

    def records(self) -> list[api.Record]:
        """What this agent's dead-man's switch did (already on the controller's clock)."""
        return self.request("records", timeout=15.0).records

    def tail_start(self, paths: list[str], signals: list, max_buffer: int = 20_000, base: str | None = None) -> None:
        self.request("tail_start", api.TailStart(paths=paths, signals=signals, max_buffer=max_buffer, base=base),
                     30.0)

    def tail_fetch(self, max_events: int = 5_000, *, stop: bool = False) -> api.TailBatch:
        """The events the agent matched, their times moved onto the controller's clock."""
        batch = (self.request("tail_stop", None, 30.0) if stop
                 else self.request("tail_fetch", api.TailFetch(max_events=max_events), 30.0))
        return batch.model_copy(update={"events": [e.model_copy(update={"t": self.local_time(e.t)})
                                                   for e in batch.events]})

    def list_folders(self, folders: list[str], ignore: list[str] | None = None) -> dict[str, str]:
        """What each folder holds on this agent's node, in words (less the names ``ignore`` matches)."""
        return self.request("list_folders", api.ListFolders(folders=folders, ignore=ignore or []), 30.0).folders

    def free_port(self) -> int:
        return self.request("free_port").port

    def lease_acquire(self, cluster: str, holder: str) -> None:
        self.request("lease_acquire", api.LeaseAcquire(cluster=cluster, holder=holder))

    def lease_release(self) -> None:
        self.request("lease_release", timeout=10.0)
