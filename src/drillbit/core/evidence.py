"""What each fault leaves as proof of its effect: one typed model per kind of effect.

A fault declares its model (``Fault.evidence``); the agent validates what ``confirm`` hands
over against it before the controller records it (a fault that hands the checks nothing, or
a misspelt field, is refused there, not read as "no data" by a check), and tags the evidence
with the model's ``kind``. The checks read the fields of :func:`parse`'s typed models, never
``data.get("…")`` keys. Plain models, below both the faults and the checks.
"""
from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class Effect(BaseModel):
    """The base: a plugin fault that declares no model of its own hands over any fields."""

    model_config = ConfigDict(extra="allow")
    kind: ClassVar[str] = "effect"


class _Strict(Effect):
    model_config = ConfigDict(extra="forbid")


class ProcessGone(_Strict):
    """kill-rank: the process is gone."""

    kind: ClassVar[str] = "process-gone"
    pid: int


class ProcessStopped(_Strict):
    """hang-collective, dataloader-hang: the process is stopped (state T)."""

    kind: ClassVar[str] = "process-stopped"
    pid: int
    status: str


class LinkCut(_Strict):
    """partition, lossy-link, flap: the nftables table that drops the node's packets is loaded;
    slow-link: the tbf that caps what it sends (``rate_mbit``)."""

    kind: ClassVar[str] = "link-cut"
    table: str
    netns: str
    scope: str
    endpoint: str | None
    direction: str
    loss_pct: float
    control_plane: str | None = None  # the profile's control_plane entry the endpoint is
    rate_mbit: float | None = None  # slow-link: the cap on what the node sends


class ControlPlaneDown(_Strict):
    """kill-control-plane: the job's control-plane process is gone, or stopped (SIGSTOP)."""

    kind: ClassVar[str] = "control-plane-down"
    name: str
    pid: int
    cmdline: str
    signal: str
    status: str


class NodeGone(_Strict):
    """kill-node, node-crash: every process of the job on the node is gone."""

    kind: ClassVar[str] = "node-gone"
    node: str | None
    processes: int


class NodeState(_Strict):
    """node-down: the scheduler shows the node in this state — or, where it was back before it
    could be read, the requeue (Restarts) it made of the job that ran on the node."""

    kind: ClassVar[str] = "node-state"
    node: str
    state: str
    job_id: str | None = None
    restarts: int | None = None


class FileDamage(_Strict):
    """corrupt-checkpoint, restore-hang: one checkpoint damaged, and how its reads were watched."""

    kind: ClassVar[str] = "file-damage"
    checkpoint: str                        # the damaged checkpoint: its folder, or the file itself
    step: int | None = None                # its step, where its layout names one
    file: str                              # the file of it that was touched
    root: str | None = None                # the job's checkpoint folder
    checkpoints: dict[str, int | None] = {}  # every checkpoint there was to read, and its step
    saved_since: dict[str, int | None] = {}  # those the job saved after the fault chose, before the kill
    reads: str = "none"                    # how reads were seen: fanotify | inotify | none
    reads_local: bool | None = None        # False: a network filesystem (other hosts' reads unseen)
    reads_why: str = ""
    original_sha256: str | None = None
    now_sha256: str | None = None
    killed_pid: int | None = None
    hang: bool = False
    written_before_run: bool = False       # the file predates the job's run (damaged by params.older_ok)


class SaveCrash(_Strict):
    """kill-during-save: where in which save the kill landed, and what it left."""

    kind: ClassVar[str] = "save-crash"
    point: str
    save: int
    watch: str
    gone: bool
    killed: list[int]
    scope: str
    t_event: float
    t_kill: float
    lag_s: float
    since_save_start_s: float
    file: str
    torn: dict[str, Any] | None = None
    open_at_kill: list[str] = []
    events: list[dict[str, Any]] = []
    kept: str | None = None
    dir: str | None = None
    crashed: str | None = None
    crashed_step: int | None = None
    crashed_complete: bool | None = None
    crashed_why: str = ""
    published: list[str] = []
    best_complete: str | None = None
    best_complete_step: int | None = None
    checkpoints: list[dict[str, Any]] = []


class SaveRecorded(_Strict):
    """kill-during-save with record: one save's file events, nothing killed."""

    kind: ClassVar[str] = "save-recorded"
    recorded: bool
    watch: str
    save: int
    events: list[dict[str, Any]]


class Slowed(_Strict):
    """slow-rank: the duty cycle runs, with the slowdown it achieves."""

    kind: ClassVar[str] = "slowed"
    target_slowdown: float
    stop_fraction_target: float
    stop_fraction_achieved: float
    slowdown_achieved: float | None


class Throttled(_Strict):
    """throttle-clocks: the GPU's clocks or power limit before and during."""

    kind: ClassVar[str] = "throttled"
    before: dict[str, Any]
    during: dict[str, Any]
    locked_max_mhz: int | None = None


class TierLost(_Strict):
    """lose-local-tier: the rank and its local tier's folder are gone."""

    kind: ClassVar[str] = "tier-lost"
    lost: str
    tier: str
    entries: list[str]


class ReplacementBroken(_Strict):
    """fail-node-replacement: the node is declared dead and its replacement misbehaves."""

    kind: ClassVar[str] = "replacement-broken"
    node: str | None
    shim: str
    mode: str
    declared_dead: bool


KINDS: dict[str, type[Effect]] = {m.kind: m for m in (Effect, ProcessGone, ProcessStopped, NodeGone, NodeState,
                                                       FileDamage, SaveCrash, SaveRecorded, Slowed, Throttled,
                                                       TierLost, ReplacementBroken, LinkCut, ControlPlaneDown)}


def parse(evidence: dict[str, Any]) -> Effect | None:
    """One recorded evidence (``{t, what, kind, data}`` as history holds it) as its typed model;
    None for one recorded without a kind that fits (an older history, a malformed line)."""
    if not isinstance(evidence, dict):
        return None
    model = KINDS.get(str(evidence.get("kind") or ""))
    data = evidence.get("data")
    if model is None or not isinstance(data, dict):
        return None
    try:
        return model.model_validate(data)
    except ValueError:
        return None


def effects(confirmed_data: dict[str, Any]) -> list[Effect]:
    """The typed evidence of a ``fault.confirmed`` event."""
    return [e for e in (parse(x) for x in confirmed_data.get("evidence", []) or []) if e is not None]
