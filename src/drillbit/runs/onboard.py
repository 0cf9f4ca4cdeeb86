"""``drill probe --job NAME``: onboard a job before drilling it. Launch it (or attach), watch
it for N steps or S seconds, touch nothing, and say what drillbit can see: the ranks per
node, every signal that fired (count, rate, a sample line and what was parsed from it), the
step time, the checkpoints in the profile's layout, and for each drill in the catalogue
whether this job can run it and what is missing.
"""
from __future__ import annotations

import re
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from drillbit.spec.checkpoints import scan
from drillbit.core.dirwatch import DirWatch
from drillbit.core.errors import ConfigError, LeaseError, SpecError, Stopped
from drillbit.core.lease import LEASE_WAIT, take
from drillbit.faults import get as get_fault
from drillbit.faults.loading import load_drill
from drillbit.loop.preflight import refusals
from drillbit.judging.probes.preset import load as load_preset
from drillbit.judging.probes.tail import FileSet
from drillbit.core.proc import ProcRef
from drillbit.core.saves import SaveTracker
from drillbit.spec.config import ClusterSpec, JobProfile
from drillbit.spec.load import catalogue
from drillbit.spec.models import DrillSpec
from drillbit.spec.placeholders import expand
from drillbit.transport import connect
import contextlib

# what each SLO is measured from (judging/checks/slo.py): a drill with the SLO needs the event kind
SLO_NEEDS = {"detect_within": "detect", "restart_within": "restart", "restore_within": "restore",
             "straggler_within": "straggler"}
FILE_FAULTS = ("corrupt-checkpoint", "restore-hang")


def label_of(kind: str, by: str | None, source: str, pattern: str, name: str | None = None) -> str:
    """A signal by a name a person can tell from its neighbours: the kind, who says it, and the
    words of its pattern (groups shown as <name>): 'detect (torchrun): Worker group FAILED. <left>/<max> …'."""
    if name:
        return f"{kind} ({by or source}): {name}"
    text = re.sub(r"\(\?P<(\w+)>((?:[^()]|\([^()]*\))*)\)",
                  lambda m: m.group(2).replace(".*", "…") if m.group(1) == "message" else f"<{m.group(1)}>", pattern)
    text = re.sub(r"\(\?:[^()]*\)\??", "", text)
    text = re.sub(r"\\([^\w\s])", r"\1", text).replace("^", "").replace("$", "").replace(" +", " ").strip()
    text = re.sub(r"\\[dswSDW][+*]?", "…", text)
    return f"{kind} ({by or source}): {text[:70] + ('…' if len(text) > 70 else '')}"


@dataclass
class Tally:
    kind: str
    source: str
    pattern: str
    label: str = ""
    count: int = 0
    sample: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    first_t: float | None = None
    last_t: float | None = None

    def as_dict(self, seconds: float) -> dict:
        return {"kind": self.kind, "source": self.source, "label": self.label, "pattern": self.pattern,
                "count": self.count,
                "per_s": round(self.count / seconds, 3) if seconds > 0 else None, "sample": self.sample,
                "fields": self.fields}


class Watcher:
    """Every signal of a profile, each counted on its own (a drill's probes merge them)."""

    def __init__(self, job: JobProfile, paths: list[Path]) -> None:
        self.tallies: list[tuple[Tally, Any, re.Pattern]] = []
        for name in job.presets:
            for sig in load_preset(name).all_signals():
                self.tallies.append((Tally(sig.kind, name, sig.pattern, label_of(sig.kind, sig.by, name, sig.pattern, sig.name)),
                                     sig, re.compile(sig.pattern)))
        for sig in job.signals:
            self.tallies.append((Tally(sig.kind, "profile", sig.pattern,
                                       label_of(sig.kind, sig.by, "profile", sig.pattern, sig.name)), sig,
                                 re.compile(sig.pattern)))
        self.files = FileSet(paths)  # globs followed as their files appear
        self.paths = paths
        self.lines = 0
        self.unmatched: list[str] = []
        self.steps: list[tuple[float, int]] = []  # (time, n), one per new step number

    def poll(self) -> None:
        for follower in self.files.followers():
            for line in follower.read_lines():
                self.lines += 1
                now = time.time()
                matched = False
                for tally, sig, rx in self.tallies:
                    m = rx.search(line)
                    if not m:
                        continue
                    matched = True
                    data = {k: v for k, v in m.groupdict().items() if v is not None}
                    for k in (*sig.ints, *sig.floats):
                        if k in data:
                            with contextlib.suppress(ValueError):
                                data[k] = (int if k in sig.ints else float)(data[k])
                    t = now
                    if "t" in data:  # shown parsed: a wrong time_format is seen here, not in a verdict
                        try:
                            t = sig.parse_time(str(data["t"]))
                            data["t"] = f"{data['t']} -> {t:.3f} (epoch s)"
                        except ValueError:
                            data["t"] = f"{data['t']} -> unreadable with time_format {sig.time_format!r}"
                    tally.count += 1
                    tally.first_t = tally.first_t or t
                    tally.last_t = t
                    if tally.sample is None:
                        tally.sample, tally.fields = line.strip()[:300], data
                    if tally.kind == "step" and isinstance(data.get("n"), int):
                        n = int(data["n"])
                        if not self.steps or self.steps[-1][1] != n:
                            self.steps.append((t, n))
                if not matched and len(self.unmatched) < 5 and line.strip():
                    self.unmatched.append(line.strip()[:200])

    def distinct_steps(self) -> int:
        return len({n for _, n in self.steps})

    def step_time(self) -> float | None:
        gaps = [(t1 - t0) / (n1 - n0) for (t0, n0), (t1, n1) in zip(self.steps, self.steps[1:], strict=False) if n1 > n0]
        return statistics.median(gaps) if gaps else None


class SaveWatch:
    """The job's saves during the probe, seen as kill-during-save sees them (a burst of file
    events in the checkpoint folder, an in-place rewrite included), where this machine sees the
    folder; ``count`` is None where it cannot."""

    def __init__(self, job: JobProfile, values: dict[str, str], cluster: ClusterSpec) -> None:

        self.watch = None
        self.tracker = SaveTracker()
        if job.checkpoint is not None and not cluster.logs_on_agents:
            self.watch = DirWatch(expand(job.checkpoint.dir, values))

    def poll(self) -> None:
        if self.watch is not None:
            for event in self.watch.events(0.0):
                self.tracker.feed(event)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

    def count(self) -> int | None:
        return None if self.watch is None else len(self.tracker.saves)


def readiness(spec: DrillSpec, job: JobProfile, kinds: set[str], ranks: list[ProcRef],
              checkpoints: list | None, *, refused: list[str], saves_seen: int | None = None) -> list[str]:
    """What this job lacks for this drill on this cluster (empty: it can run it): what the
    drill's own preflight refuses (``refused``: :func:`drillbit.loop.preflight.refusals`, the
    one function the drill runs too), and what the probe saw missing (signals, ranks,
    checkpoints on disk, saves seen as saves)."""

    missing = list(refused)
    fault_cls = get_fault(spec.fault.type)
    if spec.slo.restore_tier is not None and not job.tiers:
        missing.append("tiers: in the profile (where each copy of a checkpoint lives)")
    if fault_cls.arms_on_save:
        if job.checkpoint is None:
            missing.append("checkpoint: {dir, layout} in the profile (the save is watched there)")
        elif saves_seen == 0:
            missing.append(f"a save seen in {job.checkpoint.dir} during the probe (no file was written or rewritten "
                           "there: watch longer, or check dir)")
    if "step" not in kinds and not job.heartbeat_file:
        missing.append("a step signal (or heartbeat_file)")
    if not ranks:
        missing.append("rank processes (ranks: in the profile found none)")
    wanted = spec.fault.targets.ranks or []
    found = {r.rank for r in ranks}
    absent = [r for r in wanted if r not in found]
    if ranks and absent:
        missing.append(f"rank(s) {absent} (the drill targets them; found {sorted(x for x in found if x is not None)})")
    for slo, kind in SLO_NEEDS.items():
        if getattr(spec.slo, slo, None) is not None and kind not in kinds:
            missing.append(f"a {kind} signal (for {slo})")
    return missing + _fault_needs(spec.fault.type, job, checkpoints)


def _fault_needs(fault: str, job: JobProfile, checkpoints: list | None) -> list[str]:
    """What a fault of this type needs of the job and the node that the probe can see."""
    missing = []
    if fault in FILE_FAULTS:
        if job.checkpoint is None:
            missing.append("checkpoint: {dir, layout} in the profile")
        elif checkpoints is not None and not checkpoints:
            missing.append(f"a checkpoint on disk (none in {job.checkpoint.dir} during the probe; watch longer "
                           "or check dir and layout)")
    if fault == "fail-node-replacement" and job.replacement is None:
        missing.append("replacement: the job's node-replacement hook")
    if fault == "throttle-clocks":
        try:
            import pynvml  # noqa: F401
            pynvml.nvmlInit()
        except Exception:
            missing.append("NVIDIA GPUs with NVML (nvidia-ml-py) on the nodes")
    return missing


def probe(cluster_name: str, cluster: ClusterSpec, job_name: str, job: JobProfile, run_dir: Path,
          drills: dict[str, DrillSpec], *, steps: int = 20, seconds: float = 120.0, status=None,
          waiting: Callable[[str], None] | None = None) -> dict:
    """What drillbit can see of the job (the module's docstring). The cluster's lease is taken
    as a drill takes it: a busy cluster is a ConfigError (exit 2) naming the holder, or is
    waited for where ``--wait`` asks (``waiting`` is told that it waits, and for whom)."""

    if cluster.protected:
        raise ConfigError(f"cluster {cluster_name!r} is protected; drillbit launches nothing there")
    if job.launch is None and job.attach_pid is None:
        raise ConfigError(f"job profile {job_name!r} has neither launch nor attach_pid")
    run_dir.mkdir(parents=True, exist_ok=True)
    nodes = connect(cluster_name, cluster, run_dir)
    lease = _leased(nodes, f"probe {job_name} ({run_dir.name})", cluster_name, run_dir, waiting)
    launched, attached = None, None
    started = time.time()
    try:
        nodes.start(ProcRef.of(psutil.Process()))
        if job.launch is not None:
            launched = nodes.launch(job)
        else:
            attached = nodes.attach_root(job.attach_pid or 0, job.attach_start_time)
        watcher = Watcher(job, nodes.log_paths(job))
        saves = SaveWatch(job, nodes.values, cluster)
        exit_code = None
        ranks: list[ProcRef] = []
        while time.time() - started < seconds and watcher.distinct_steps() < steps + 1:
            watcher.poll()
            saves.poll()
            if launched is not None and (exit_code := launched.exit_code()) is not None:
                break
            if status:
                status(f"{time.time() - started:5.1f} s · {watcher.distinct_steps()} step(s) · {watcher.lines} line(s)")
            if not ranks and watcher.steps:
                ranks = nodes.find_ranks(job.ranks, attached)
            time.sleep(0.2)
        watcher.poll()
        if exit_code is None:
            ranks = nodes.find_ranks(job.ranks, attached) or ranks
        ckpt_spec = None
        if job.checkpoint is not None:
            ckpt_spec = job.checkpoint.model_copy(update={"dir": expand(job.checkpoint.dir, nodes.values)})
        checkpoints = scan(ckpt_spec) if ckpt_spec is not None else None
        saves.poll()
        saves.close()
    finally:
        try:
            if launched is not None:
                launched.stop()
        finally:
            nodes.close()
            lease.release()
    watched = time.time() - started
    saves_seen = saves.count()
    kinds = {t.kind for t, _, _ in watcher.tallies}
    fired = [t for t, _, _ in watcher.tallies if t.count]
    per_node: dict[str, list[int | None]] = {}
    for r in ranks:
        per_node.setdefault(r.node or "?", []).append(r.rank)
    catalogue = {}
    for name, spec in sorted(drills.items()):
        refused = refusals(spec, job, job_name, cluster, cluster_name, nodes, run_dir)
        missing = readiness(spec, job, kinds, ranks, checkpoints, refused=refused, saves_seen=saves_seen)
        catalogue[name] = {"fault": spec.fault.type, "ready": not missing, "missing": missing}
    step_fired = any(t.kind == "step" for t in fired)
    return {
        "job": job_name, "cluster": cluster_name, "run_dir": str(run_dir), "watched_s": round(watched, 1),
        "job_exit_code": exit_code,
        "ranks": {node: sorted(r for r in rs if r is not None) for node, rs in per_node.items()},
        "logs": [{"path": str(p), "exists": p.exists()} for p in watcher.paths], "lines": watcher.lines,
        "signals": [t.as_dict(watched) for t, _, _ in watcher.tallies],
        "unmatched_sample": watcher.unmatched if not step_fired else [],
        "steps_seen": watcher.distinct_steps(),
        "step_time_s": round(st, 4) if (st := watcher.step_time()) is not None else None,
        "checkpoints": None if checkpoints is None else {
            "dir": ckpt_spec.dir if ckpt_spec else None, "layout": ckpt_spec.layout if ckpt_spec else None,
            "found": [c.as_dict() for c in checkpoints[:5]], "count": len(checkpoints)},
        "saves_seen": saves_seen,
        "catalogue": catalogue,
        "step_signal_fired": step_fired,
    }


def _leased(nodes: Any, holder: str, cluster_name: str, run_dir: Path, waiting: Callable[[str], None] | None) -> Any:
    """The cluster's lease for the probe, as a drill takes it (``--wait`` too). Refused or
    stopped while it waited: nothing was started, so the engine's connections are closed and
    the run folder goes."""
    try:
        return take(lambda: nodes.acquire(holder), LEASE_WAIT.get(), waiting or (lambda _text: None))
    except BaseException as exc:
        try:
            nodes.close()
        finally:
            if isinstance(exc, (LeaseError, KeyboardInterrupt)):
                shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(exc, LeaseError):
            raise ConfigError(f"{exc}; nothing was started (probe it once that drill is done)") from None
        if isinstance(exc, KeyboardInterrupt):
            raise Stopped(f"interrupted before the probe took cluster {cluster_name!r}: nothing was started") from None
        raise


def load_drills(config, drills_dir: str | None = None) -> dict[str, DrillSpec]:

    out = {}
    for name, path in catalogue(drills_dir).items():
        try:
            out[name] = load_drill(path, config)
        except SpecError:
            continue  # a broken drill spec is `drill validate`'s to report
    return out

