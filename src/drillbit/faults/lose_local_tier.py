"""lose-local-tier (fail-stop): a node is replaced and its local checkpoint tier goes with it.

Multi-tier checkpointing (Orbax's emergency checkpoints, DLRover's flash checkpoints,
torchft's peer healing) saves often to a fast local tier — host memory or local disk — and
rarely to a slow persistent one. A process killed on a healthy host finds its local tier
again; a host that is replaced does not. The fault kills the target rank and takes its
local tier's folder away (moved aside, next to it, as a hidden folder): the restart must
then restore from a peer's copy or the persistent tier — and should not fall back further
than the tiers still allow (SLO ``restore_tier``).

The folder is the profile's ``tiers.<tier>.dir`` with ``{rank}`` (and ``{node}``) filled
for the target, or the ``folder`` param. The heal puts back everything that was taken and
that the job has not written again since (the job's newer files stay), and verifies it.
"""
from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

from pydantic import Field

from drillbit.core.evidence import TierLost
from drillbit.core.errors import FaultError
from drillbit.faults.base import Evidence, Fault, HealReport, Params, Plan
from drillbit.faults.ckptfile import ActsAs, acts_as, wait_gone
from drillbit.core.jobhands import Hands
from drillbit.core.proc import ProcRef


class LoseLocalTierParams(Params):
    tier: str = Field("local", description="the job profile's tier whose copy on the target is lost")
    folder: str | None = Field(None, description="the folder of that copy ({rank}, {node}, {run_dir} filled in); "
                                                 "default: the profile's tiers.<tier>.dir")
    confirm_timeout_s: float = Field(10.0, gt=0)


class LoseLocalTierState(ActsAs):
    folder: str
    aside: str
    entries: list[str] = []
    t_killed: float | None = None
    parent_id: list[int] | None = None  # the folder that holds the tier's, as the move found it


class LoseLocalTier(Fault[LoseLocalTierParams, LoseLocalTierState]):
    name = "lose-local-tier"
    needs = ("write access to the local tier's folder and the job's signals (the job's user, or root)")
    blast_radius = ("one rank's local-tier folder (moved aside beside it, put back and verified), and that rank "
                    'killed')
    binds = ("tier",)
    evidence = (TierLost,)
    verb = "killed (its local tier lost)"
    fault_class = "fail-stop"
    Params = LoseLocalTierParams
    State = LoseLocalTierState
    expects = "crash"

    def _folder(self, target: ProcRef, params: LoseLocalTierParams) -> str:
        if params.folder is None:
            raise FaultError(f"lose-local-tier: the job profile has no tiers.{params.tier} and the drill names no "
                             "folder")
        return params.folder.replace("{rank}", str(target.rank)).replace("{node}", str(target.node))

    def plan(self, targets: list[ProcRef], params: LoseLocalTierParams) -> Plan:
        where = params.folder or f"tiers.{params.tier}"
        return Plan(fault=self.name, targets=targets,
                    action=f"SIGKILL each target and move its {params.tier} tier ({where}) aside",
                    heal="move back what the job did not write again; the moved folder is kept until then")

    def prepare(self, target: ProcRef, params: LoseLocalTierParams) -> LoseLocalTierState:
        # a tier folder that is a link (/local -> /nvme0/local) is taken at its real place: moving
        # the link aside would leave the copy where the job finds it, and put back a link over a folder
        folder = os.path.realpath(self._folder(target, params))
        if folder.count(os.sep) < 2 or folder in (os.path.expanduser("~"), os.path.realpath(os.getcwd())):
            raise FaultError(f"lose-local-tier: {folder} is not a checkpoint tier's folder (a top-level folder, the "
                             "home or working folder); name the tier's own folder")
        if not os.path.isdir(folder):
            raise FaultError(f"lose-local-tier: {folder} is not a folder (rank {target.rank}'s {params.tier} tier)")
        parent, name = os.path.split(folder)
        aside = os.path.join(parent, f".{name}.drillbit-lost-{int(time.time() * 1000)}-{secrets.token_hex(4)}")
        hands = Hands.of_target(target)
        # what the act will do, asked of the job's hands before any rank is killed: refused here, nothing happened
        hands.must("move_aside", {"real_root": parent, "dirs": [], "name": name, "aside": os.path.basename(aside),
                                  "dry": True}, what=self.name)
        return LoseLocalTierState(folder=folder, aside=aside, entries=sorted(os.listdir(folder)), **acts_as(hands))

    def act(self, target: ProcRef, params: LoseLocalTierParams, intent: LoseLocalTierState) -> LoseLocalTierState:
        target.send(signal.SIGKILL)
        t_killed = time.time()
        wait_gone(target, params.confirm_timeout_s)
        # the host's disk is gone with it, and a replacement host's is empty: by the job's hands, in the
        # folder that holds the tier's (opened once, no link followed), never over anything
        parent, name = os.path.split(intent.folder)
        answer, _ = intent.hands().call("move_aside", {"real_root": parent, "dirs": [], "name": name,
                                                       "aside": os.path.basename(intent.aside)})
        if "error" in answer:  # the rank is killed already: not a clean refusal, so the fault stays to heal
            raise OSError(answer.get("errno") or 0, f"{self.name}: moving {intent.folder} aside failed after the "
                                                    f"rank was killed: {answer['error']}")
        return intent.model_copy(update={"entries": answer["entries"], "t_killed": t_killed,
                                         "parent_id": answer["parent"]})

    def confirm(self, target: ProcRef, params: LoseLocalTierParams, state: LoseLocalTierState) -> Evidence | None:
        if not wait_gone(target, params.confirm_timeout_s) or not os.path.isdir(state.aside):
            return None
        return Evidence(t=state.t_killed or time.time(),
                        what=f"rank {target.rank} is gone and its {params.tier} tier ({len(state.entries)} entries) with it",
                        data={"lost": state.folder, "tier": params.tier, "entries": state.entries})

    def distrust(self, params: LoseLocalTierParams, state: LoseLocalTierState, scratch: Path | None, told: bool) -> str | None:
        """The folder is the one its params name; what was moved aside lies beside it, by the
        name this fault gives it."""
        folder = os.path.normpath(state.folder)
        if params.folder is not None and folder != os.path.normpath(params.folder):
            return f"its folder {state.folder} is not the tier folder it names ({params.folder})"
        aside = os.path.normpath(state.aside)
        if os.path.dirname(aside) != os.path.dirname(folder) or \
                not os.path.basename(aside).startswith(f".{os.path.basename(folder)}.drillbit-lost-"):
            return f"what it moved aside ({state.aside}) is not beside {state.folder} by the name this fault gives it"
        return None

    def heal(self, target: ProcRef, params: LoseLocalTierParams, state: LoseLocalTierState) -> HealReport:
        parent, name = os.path.split(state.folder)
        answer, _ = state.hands().call("move_back", {"real_root": parent, "dirs": [], "name": name,
                                                     "aside": os.path.basename(state.aside), "entries": state.entries,
                                                     "expect": {"root": state.parent_id}})
        if "error" in answer:
            return HealReport(healed=False, verified=False, detail=f"could not put {state.folder} back: "
                                                                  f"{answer['error']} (what was taken is in {state.aside})")
        if answer["outcome"] == "none":
            back = all(os.path.exists(os.path.join(state.folder, e)) for e in state.entries)
            return HealReport(healed=back, verified=back, detail="nothing held aside" + ("" if back else
                              f"; {state.aside} is missing and so are some of {state.entries}"))
        if answer["outcome"] != "restored":  # the folder that holds it was moved or is a link now: nothing written
            return HealReport(healed=False, verified=False, detail=f"{answer['detail']}; nothing was written there "
                                                                  f"(what was taken is in {state.aside})")
        kept, missing = answer["kept"], answer["missing"]
        detail = f"put back {len(state.entries) - len(kept)} entries of {state.folder}"
        if kept:  # nothing the harness took is deleted: the older copies stay aside, and say where
            detail += f"; {len(kept)} the job had written again stay as the job wrote them, the older ones in {state.aside}"
        return HealReport(healed=not missing, verified=not missing, detail=detail + (f"; missing {missing}"
                                                                                      if missing else ""))
