"""The job's logs read by the node agents (``drillbit.agent.logtail``): the controller asks
each agent to follow its node's files, then fetches the matched events in batches and
records them, their times already on the controller's clock. A gap the agent reports (a
file replaced before its last lines were read) becomes a ``probe.gap`` event."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from drillbit.core.history import History
from drillbit.loop.bind import job_folder
from drillbit.transport.nodes import Nodes, fan_out_or_raise
from drillbit.judging.probes.poller import Poller
from drillbit.judging.probes.preset import signals_of
from drillbit.spec.config import JobProfile


IDLE_MAX_S = 1.0  # an agent whose tail had nothing is asked again after at most this long


class AgentLogProbe(Poller):
    """Polls every agent's tail every ``poll`` seconds while it has events; an agent whose tail
    had none is asked half as often each time, down to once a second (a thousand nodes whose
    logs step every few seconds were 5,000 fetches a second of the controller's CPU for
    nothing). The events keep the times the agents read them at, so asking later changes no
    figure; a poll the loop asks for itself (the job ended, the probes stop) asks every agent."""

    name = "probe:agents"

    def __init__(self, history: History, nodes: Nodes, job: JobProfile, poll: float = 0.2) -> None:
        super().__init__(poll)
        self._history = history
        self._nodes = nodes
        self._signals = signals_of(job.presets, job.signals)
        self._assigned = nodes.logs_by_node(job)
        run_dir = getattr(nodes, "values", {}).get("run_dir")
        self._base = job_folder(job, Path(run_dir)) if run_dir else None  # its lines' relative paths
        self._lock = threading.Lock()
        self.lines: dict[str, int] = {}
        self.unmatched: list[str] = []
        self.paused: dict[str, int] = {}
        self.missing_on: dict[str, list[str]] = {}  # each node's logs no file answers yet
        self._wait: dict[str, float] = {}  # each node's time between polls now
        self._due: dict[str, float] = {}  # when the thread asks each node next

    def start(self) -> None:
        fan_out_or_raise(list(self._assigned), lambda node: self._nodes.clients[node].tail_start(
            self._assigned[node], self._signals, base=self._base))
        super().start()

    def _poll_step(self) -> None:
        try:
            self.poll_once(idle_backoff=True)
        except Exception as exc:  # an agent that cannot answer now: the drill's own checks see it
            self._history.record("probe:agents", "probe.error", detail=f"{exc.__class__.__name__}: {exc}")

    def poll_once(self, *, final: bool = False, idle_backoff: bool = False) -> None:
        """Every agent's new events (``idle_backoff``: those due), the agents asked in parallel
        (each node's batches in their order); the first agent that could not answer is raised
        once the others were read."""
        with self._lock:
            now = time.monotonic()
            due = [n for n in self._assigned if not idle_backoff or self._due.get(n, 0.0) <= now]
            fan_out_or_raise(due, lambda node: self._fetch(node, final))

    def _fetch(self, node: str, final: bool) -> None:
        client = self._nodes.clients[node]
        got = 0
        while True:
            batch = client.tail_fetch(stop=final)
            got += len(batch.events)
            rows = []
            for e in batch.events:
                fields = dict(e.data)
                where = fields.pop("node", node)  # a straggler line names its own node
                rows.append((e.kind, e.t, where, e.rank, fields))
            self._history.record_many(f"probe:{node}", rows)  # the batch in one turn at the history's lock
            self.lines[node] = batch.lines
            self.paused[node] = batch.paused
            self.missing_on[node] = batch.missing
            self.unmatched = self.unmatched or batch.unmatched
            if not batch.more or final:
                break
        wait = self._every if got else min(IDLE_MAX_S, 2 * self._wait.get(node, self._every))
        self._wait[node], self._due[node] = wait, time.monotonic() + wait

    def stop(self) -> None:
        super().stop()
        try:
            self.poll_once(final=True)
        except Exception as exc:
            self._history.record("probe:agents", "probe.error", detail=f"{exc.__class__.__name__}: {exc}")

    def missing(self) -> dict[str | None, list[str]]:
        """The logs no file answers yet on each node, as its agent last said."""
        return {node: paths for node, paths in self.missing_on.items() if paths}

    def explain(self) -> str:
        steps = [s.pattern for s in self._signals if s.kind == "step"]
        read = ", ".join(f"{node}: {n} line(s) of {', '.join(self._assigned[node])}" for node, n in self.lines.items())
        text = f"step signals: {steps or 'none'}; read on the nodes: {read or 'nothing yet'}"
        if self.unmatched:
            text += "; first lines no signal matched: " + " | ".join(repr(u) for u in self.unmatched[:3])
        return text
