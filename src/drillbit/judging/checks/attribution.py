"""Attribution: did the stack blame the rank the fault hurt, and only that one?

The fault knows whom it hurt: its target ranks, or every rank of the target's node for a
fault that takes a node down (``Fault.hurts``). The stack says whom it blamed in its own
lines, read by its preset:

- ``blame`` events: a rank (group ``rank``), a node (``blamed_node``; ``node`` is where a
  line was read) or a process (``pid``, mapped
  to its rank through the ranks the fault found, ``job.ranks``) named as failed, restarted,
  excluded or flagged — torchrun's "failed (exitcode …) (pid: P)", a rank monitor's missing
  heartbeat;
- ``members`` events: the stack's membership (a torchft quorum, a worker group); a member of
  the last membership before the fault that is missing from a later one — gone, or back as a
  new incarnation under a new id — was blamed;
- ``straggler`` events: the rank a straggler detector named.

Only what the stack said after the fault and before observation ended counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from drillbit.core.events import FaultInject, JobPayload, JobRanks, Kind, Members, Straggler
from drillbit.core.history import Event, of


class Attribution(BaseModel):
    hurt: list[int] = []            # ranks the fault hurt
    hurt_nodes: list[str] = []
    blamed: list[int] = []          # ranks the stack blamed
    blamed_nodes: list[str] = []    # nodes it blamed as a whole
    correct: bool = False           # blamed exactly the hurt ranks
    false_blames: list[int] = []    # blamed, not hurt
    missed: list[int] = []          # hurt, never blamed
    by: list[str] = []              # who in the stack did the blaming
    blamed_by: dict[str, list[str]] = {}  # rank -> who blamed it
    verb: str = "hurt"              # what the fault did, for reasons
    text: str = ""                  # describe(), for reports

    def covers(self) -> bool:
        """Every hurt rank was blamed (others may have been too)."""
        return not self.missed

    def describe(self) -> str:
        """'the stack blamed ranks 0 and 1; only rank 1 was stopped'."""
        said = f"the stack blamed {_ranks(self.blamed)}" if self.blamed else "the stack blamed no rank"
        if self.blamed and not self.correct:
            said += " (" + "; ".join(f"{r}: {', '.join(self.blamed_by.get(str(r), ['?']))}" for r in self.blamed) + ")"
        if self.blamed_nodes:
            said += f" (node{'s' if len(self.blamed_nodes) > 1 else ''} {', '.join(self.blamed_nodes)})"
        if self.correct:
            return f"{said}, the one{'s' if len(self.hurt) > 1 else ''} {self.verb}"
        only = "only " if self.false_blames and not self.missed else ""
        was = "were" if len(self.hurt) > 1 else "was"
        return f"{said}; {only}{_ranks(self.hurt)} {was} {self.verb}"


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


@dataclass
class _Blames:
    """Whom the stack's lines named, as they are read."""

    rank_of_pid: dict[int, Any]
    blamed: set[int] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    by: set[str] = field(default_factory=set)
    by_rank: dict[str, set[str]] = field(default_factory=dict)
    saw_stack: bool = False
    last_members: dict[str | None, dict[str, dict]] = field(default_factory=dict)

    def blame(self, rank: object, node: object, who: str) -> None:
        if isinstance(rank, int):
            self.blamed.add(rank)
            self.by_rank.setdefault(str(rank), set()).add(who)
        elif node:
            self.nodes.add(str(node))
        else:
            return
        self.by.add(who)

    def members(self, e: Event, t0: float, who: str) -> None:
        """A membership line: before the fault, the membership it hit; after, whoever of that
        membership is missing was dropped (blamed)."""
        said = Members.of(e)
        items = {str(i.get("id")): i for i in said.members}
        key = None if said.by is None else str(said.by)
        if e.t <= t0:
            self.last_members[key] = items
            return
        for gone, item in self.last_members.get(key, {}).items():
            if gone not in items:
                self.blame(item.get("rank"), item.get("node"), who)

    def named(self, e: Event, who: str) -> None:
        """A blame line: one culprit in the event's own groups, or several in a list group."""
        culprits = [{"rank": e.rank, **e.data}] + [
            item for value in e.data.values() if isinstance(value, list) for item in value if isinstance(item, dict)]
        for c in culprits:
            rank, pid = c.get("rank"), c.get("pid")
            if rank is None and pid is not None and str(pid).isdigit():
                rank = self.rank_of_pid.get(int(pid))
            self.blame(rank, c.get("blamed_node") if rank is None else None, who)

    def read(self, events: list[Event], t0: float) -> None:
        for e in of(events, Kind.MEMBERS.value, Kind.BLAME.value, Kind.STRAGGLER.value):
            if e.kind == Kind.MEMBERS:
                self.saw_stack = True
                self.members(e, t0, _who(e))
            elif e.t >= t0 and e.kind == Kind.BLAME:
                self.saw_stack = True
                self.named(e, _who(e))
            elif e.t >= t0 and e.kind == Kind.STRAGGLER:
                self.saw_stack = True
                self.blame(e.rank if e.rank is not None else e.data.get("rank"), Straggler.of(e).node, _who(e))


def _who(e: Event) -> str:
    """Who said it: the line's by (a rank, a replica, the launcher), else the probe that read it."""
    by = e.payload.by if isinstance(e.payload, JobPayload) else None
    return str(by or e.source)


def attribute(events: list[Event], t0: float, hurts: str = "rank", verb: str = "hurt") -> Attribution | None:
    """The attribution of one fault; None when the stack said nothing that blames anyone
    and printed no membership (it cannot be judged, and is not a stack that attributes)."""
    injects = of(events, "fault.inject")
    ranked = [e for e in of(events, "job.ranks") if e.t <= t0 + 1]
    table: list[dict[str, Any]] = JobRanks.of(ranked[-1]).ranks if ranked else []
    rank_of_pid = {int(r["pid"]): r["rank"] for r in table if r.get("pid") is not None}
    rank_of_pid.update({pid: e.rank for e in injects if (pid := FaultInject.of(e).pid) is not None})
    node_of_rank = {r["rank"]: r.get("node") for r in table}
    hurt = {e.rank for e in injects if e.rank is not None}
    hurt_nodes = {e.node for e in injects if e.node}
    if hurts == "node":
        hurt |= {r for r, n in node_of_rank.items() if n in hurt_nodes}
    said = _Blames(rank_of_pid)
    said.read(events, t0)
    if not said.saw_stack:
        return None
    # a whole node blamed covers its ranks
    blamed = said.blamed | {r for r, n in node_of_rank.items() if n in said.nodes}
    a = Attribution(hurt=sorted(hurt), hurt_nodes=sorted(hurt_nodes), blamed=sorted(blamed),
                    blamed_nodes=sorted(said.nodes), by=sorted(said.by), verb=verb,
                    blamed_by={k: sorted(v) for k, v in said.by_rank.items()})
    a.false_blames = sorted(blamed - hurt)
    a.missed = sorted(hurt - blamed)
    a.correct = not a.false_blames and not a.missed
    a.text = a.describe()
    return a
