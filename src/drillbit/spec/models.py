"""Typed models of a drill spec. Unknown fields are errors everywhere."""
from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from drillbit.core.errors import ConfigError
from drillbit.spec.levels import parse_levels, same_level

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d)?\s*$")


MAX_DURATION_S = 366 * 86400.0  # a drill, a window or a grace longer than a year is a typo (and past what a
#                                 thread's timeout takes: 9.3e9 s overflows it)
MAX_REGEX = 4096  # characters of one pattern


def parse_duration(value: Any) -> float:
    """'90s', '10m', '1.5h', '250ms' or a bare number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration such as 60s, 10m or 1h")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
        if not math.isfinite(seconds):
            raise ValueError(f"{value!r} is not a duration: it must be a finite number of seconds")
        if seconds < 0:
            raise ValueError("a duration cannot be negative")
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(f"{str(value)[:60]!r} is not a duration (write 60s, 10m, 1h or 250ms)")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{str(value)[:60]} is more than a year ({MAX_DURATION_S:.0f} s); give a real duration")
    return seconds


def compile_regex(value: str, what: str = "regex") -> re.Pattern:
    """A user's regex compiled, or ValueError saying why not: bad syntax, a repeat count past
    what ``re`` takes (a{4294967296}), nesting too deep for the compiler, or a pattern longer
    than any log line needs."""
    if len(value) > MAX_REGEX:
        raise ValueError(f"{what}: {len(value)} characters; a pattern is at most {MAX_REGEX}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ValueError(f"{what}: bad regex: {exc}") from None
    except (OverflowError, RecursionError) as exc:
        raise ValueError(f"{what}: a regex the compiler cannot take ({exc.__class__.__name__}: {exc})") from None


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("a duration must be more than zero here")
    return value


# A window, deadline or timeout: finite and more than zero. ``Span`` may be zero (a grace
# period, a trigger "0 s after steady state").
Duration = Annotated[float, BeforeValidator(parse_duration), AfterValidator(_positive)]
Span = Annotated[float, BeforeValidator(parse_duration)]


def launcher_regex(value: str | None, what: str = "launcher") -> str | None:
    """A launcher's command-line regex, refused when it would match what is not a launcher
    (``.``, ``.*``, ``python``: a shell, an init, any process)."""
    if value is None:
        return None
    rx = compile_regex(value, what)
    strays = [c for c in ("", "-bash", "/sbin/init", "sshd: user@pts/0") if rx.search(c)]
    if strays:
        raise ValueError(f"{what}: {value!r} matches command lines that are no launcher (e.g. {strays[-1]!r}): "
                         "name the launcher, e.g. 'torch\\.distributed\\.run|torchrun'")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False, use_attribute_docstrings=True)


class Targets(Strict):
    """Which rank processes a fault hits."""

    ranks: list[int] | None = Field(None, description="explicit global ranks")
    count: int = Field(1, ge=1, description="how many ranks when not explicit")
    select: Literal["random", "first", "last"] = "random"
    """with count: which ranks of those allowed"""
    exclude_ranks: list[int] = Field(default_factory=list)
    """never pick these global ranks (e.g. rank 0, which hosts a store)"""
    exclude_nodes: list[str] = Field(default_factory=list, description="never pick a rank on these nodes "
                                                                       "(e.g. the one hosting the rendezvous store)")
    seed: int | None = None
    """the random choice's seed (default: a fresh one, recorded in the history)"""


class DuringSave(Strict):
    """Fire while the job saves a checkpoint: its ``save``-th save after steady state."""

    save: int = Field(1, ge=1, description="which save: 1 = the first that starts after steady state")
    files: int = Field(0, ge=0, description="fire once this many files of the save were written (0: as it starts)")
    delay: Span = Field(0.0, description="then wait this long")
    watch: Literal["auto", "inotify", "poll", "signal"] = Field(
        "auto", description="how the save is seen: the checkpoint folder (inotify where there is one, else "
                            "polling), or the job's checkpoint-save signal (most jobs print it as the save ends)")
    settle: Span = Field(0.5, description="a save is over after this long without a file event")


class Trigger(Strict):
    """When the fault is injected: at a training step, seconds after steady state, or during
    a checkpoint save."""

    at_step: int | None = Field(None, ge=1)
    """inject when the job logs this training step"""
    after: Span | None = None
    """inject this long after steady state"""
    during_save: DuringSave | None = None
    """inject while the job saves a checkpoint"""

    @model_validator(mode="after")
    def _one(self) -> "Trigger":
        if sum(x is not None for x in (self.at_step, self.after, self.during_save)) != 1:
            raise ValueError("give exactly one of at_step, after or during_save")
        return self


class FaultSpec(Strict):
    type: str
    """the fault plugin (drill faults lists them)"""
    targets: Targets = Field(default_factory=Targets)
    """which rank processes it hits"""
    params: dict[str, Any] = Field(default_factory=dict)
    """the fault's own parameters, checked against its Params when the spec is loaded"""
    trigger: Trigger
    """when it is injected"""
    duration: Duration | None = Field(None, description="heal the fault this long after it took effect, while the "
                                                    "drill goes on watching (a hang that clears, a slow spell "
                                                    "that ends); default: it lasts until the drill ends")


class Steady(Strict):
    warmup_steps: int = Field(5, ge=1)
    """steps the job must make before the fault (its baseline step time comes from them)"""
    members: int | None = Field(None, ge=1)
    """the newest membership the stack printed (a ``members`` signal: torchft's quorum) must hold
    at least this many members before the fault, too: a stack that trains on with whoever joined (torchft's
    ``min_replicas``) can step for a while before every replica group is in, and a fault then
    drills a job that was never whole. A job whose signals read no membership is refused"""
    timeout: Duration = 300.0
    """a job that has not made them by then ends the drill with an error, healed and recorded"""


class Observe(Strict):
    until_steps_after_recovery: int = Field(10, ge=1)
    """stop watching once the job made this many steps past the restored one"""
    window: Duration = 240.0
    """at most this long after the fault"""
    at_least: Span = 0.0
    """keep watching this long after the fault even once it recovered: a loss whose harm comes
    later (a control plane is needed again at the launchers' next membership check or the next
    restart, not at the next step)"""

    @model_validator(mode="after")
    def _inside_window(self) -> "Observe":
        if self.at_least > self.window:
            raise ValueError(f"at_least ({self.at_least:g} s) is longer than the window ({self.window:g} s)")
        return self


# The measurement names an SLO may name (judging/checks/recovery.py Measurements; a test keeps
# the two in step).
MEASUREMENTS = (
    "time_to_detect", "time_to_restart", "time_to_restore", "time_to_first_step", "step_at_fault",
    "restored_step", "lost_steps", "restarts", "steps_after_recovery", "baseline_step_s", "goodput",
    "time_to_straggler", "slowdown", "fleet_tax", "slowdown_achieved", "time_to_escalate", "replace_failures",
    "time_to_requeue", "steps_behind_best", "peer_copy_s",
)
# Where a larger value is the better one (regressions are judged the other way round).
HIGHER_IS_BETTER = ("goodput", "steps_after_recovery")


class Limit(Strict):
    max: float | None = None
    """the measurement may not be above this"""
    min: float | None = None
    """the measurement may not be below this"""

    @model_validator(mode="after")
    def _some(self) -> "Limit":
        if self.max is None and self.min is None:
            raise ValueError("give max, min or both")
        return self


class ProjectSLO(Strict):
    """Fail when the measured recovery would push fleet goodput under a floor."""

    scenario: str
    """a fleet scenario (faults/scenarios), e.g. bloom-176b or llama3-405b"""
    goodput_min: float = Field(ge=0, le=1)
    """the projected fleet goodput must stay at or above this"""
    save: Duration | None = Field(None, description="checkpoint save cost, if the scenario has none")
    interval: Duration | None = Field(None, description="checkpoint interval, if the scenario has none")
    trials: int = Field(500, ge=10)
    """Monte Carlo trials of the fleet simulator"""
    seed: int = 0
    """the simulator's seed"""


class CadenceSLO(Strict):
    """The job's save interval (from ckpt.save events) against Daly's optimum."""

    mtbf: Duration | None = None
    """the job's mean time between failures"""
    scenario: str | None = Field(None, description="take the MTBF from this scenario's rate and GPUs")
    gpus: int | None = Field(None, gt=0, description="the job's GPUs, for the scenario's per-GPU rate")
    max_ratio: float = Field(2.0, gt=1, description="actual/optimal interval allowed either way")

    @model_validator(mode="after")
    def _source(self) -> "CadenceSLO":
        if (self.mtbf is None) == (self.scenario is None):
            raise ValueError("give exactly one of mtbf or scenario")
        return self


class RestoreTierSLO(Strict):
    max_steps_behind_best: int = Field(0, ge=0, description="how many steps the restored checkpoint may be behind "
                                                            "the newest copy any tier still held")


def _one_level(value: Any, what: str) -> float:
    """A level as users write it (5%, 15s, 0.05) -> its place on the axis."""
    try:
        return parse_levels(f"x={value}")[1][0].order
    except (ConfigError, IndexError) as exc:
        raise ValueError(f"{what} {value!r}: {str(exc).removeprefix('--param x: ')}") from None


def _not_a_flag(value: Any) -> None:
    if isinstance(value, bool):  # YAML's true/false/yes/no read as a level of 1 or 0
        raise ValueError(f"{str(value).lower()} is not a level: say a number, a percentage (5%) or a duration (15s)")


class ReachSLO(Strict):
    """A graded drill's gate (issue 58): the detector must catch the fault from this level up,
    and blame no healthy rank."""

    at_most: str | float = Field(description="the reach may be no larger than this level (5%, 15s, 0.05): every "
                                             "level from it up detected in >= 95% of its repeats, with no false blame")
    false_blames_per_10k_steps: float = Field(0.0, ge=0, description="at most this many false blames per 10,000 "
                                                                     "steps at the null level (no fault on)")

    @field_validator("at_most", mode="before")
    @classmethod
    def _a_level(cls, value: Any) -> Any:
        _not_a_flag(value)
        _one_level(value, "reach.at_most")
        return value

    @property
    def at_most_order(self) -> float:
        return _one_level(self.at_most, "reach.at_most")


class UninterruptedSLO(Strict):
    """The run after its restore against the same job run once without the fault (issue 59;
    LMResiliency's test of a fault cycle): the job's own step lines compared step by step."""

    tolerance: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False,
                             description="relative difference allowed between a step's figures in the two runs "
                                         "(0: exact, as printed; 1e-6 for sums that are not bit-reproducible; below "
                                         "1); a digest must always be equal")
    steps: int | None = Field(None, ge=1, description="compare at most this many steps after the restore "
                                                      "(unset: every step both runs made)")

    @field_validator("tolerance", "steps", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        if isinstance(value, bool):  # YAML's true/yes read as 1
            raise ValueError(f"{str(value).lower()} is not a number")
        return value


class Grade(Strict):
    """Run the drill as a graded sweep (issue 58): its fault at each level, ``repeats`` times,
    judged by the reach SLO."""

    param: str = Field(pattern=r"^[a-z_][a-z0-9_]*$", description="the fault parameter graded (slowdown, "
                                                                  "loss_pct, …), or duration: the fault's length")
    levels: list[str | float] = Field(min_length=1, description="its levels as users write them: 1%, 2%, 15s, 0.05")
    repeats: int = Field(3, ge=1, le=100, description="drills a level")
    one_launch: bool = Field(True, description="every drill a segment of one launch, each after a quiet gap "
                                               "(false: each drill a launch of its own)")
    gap: Duration = Field(10.0, description="one launch: seconds with no fault on before each segment")
    seed: int = Field(0, description="one launch: the draw that orders the levels within each round")

    @field_validator("levels", mode="before")
    @classmethod
    def _no_flags(cls, value: Any) -> Any:
        for v in value if isinstance(value, list) else []:
            _not_a_flag(v)
        return value

    @model_validator(mode="after")
    def _levels_read(self) -> "Grade":
        try:
            parse_levels(f"{self.param}=" + ",".join(str(v) for v in self.levels))
        except ConfigError as exc:
            raise ValueError(str(exc).replace(f"--param {self.param}: ", "levels: ")) from None
        return self


class SLO(Strict):
    """Limits the checkers judge. Absent limits are not judged."""

    detect_within: Duration | None = None
    """the stack noticed the fault (a detection line, or the restart itself) this soon"""
    restart_within: Duration | None = None
    """the restarted worker group rendezvoused this soon"""
    restore_within: Duration | None = None
    """the job loaded a checkpoint this soon"""
    first_step_within: Duration | None = None
    """the first step past the restored one came this soon (the drill's MTTR)"""
    max_lost_steps: int | None = Field(None, ge=0)
    """steps between the fault and the restored checkpoint"""
    goodput_min: float | None = Field(None, ge=0, le=1)
    """the share of the drill window spent making steps that were kept"""
    straggler_within: Duration | None = Field(None, description="fail-slow: the slowed rank must be named in time")
    attribution: Literal["exact", "superset", "no-false-blame"] | None = Field(
        None, description="whom the stack must blame: exact — the ranks the fault hurt and no other; superset — "
                          "at least those (blaming healthy ranks too is allowed); no-false-blame — no rank the fault "
                          "did not hurt (a lossy link: the link is at fault, and blaming none is right)")
    requeue_within: Duration | None = Field(None, description="a scheduler's requeue (Slurm) after the fault")
    restore_tier: RestoreTierSLO | None = Field(
        None, description="multi-tier checkpoints: the restore must not fall back further than the tiers allowed")
    rerun_avoids_failed_node: bool | None = Field(
        None, description="true: the requeued job must run again without the node the fault took down")
    recover_or_escalate_within: Duration | None = Field(
        None, description="recovery path: a first step after recovery, or an escalation, within this")
    keep_stepping: bool | None = Field(
        None, description="true: the job must still be making steps when the watch ends (no exit, and a step within "
                          "10 baseline step times, at least 5 s, of the end): a loss the job must survive, such as its "
                          "control plane, judged over observe.at_least")
    restore_fidelity: bool | None = Field(
        None, description="true: the state that came back must be the state that was saved — loss, learning rate and "
                          "data position from the job's step lines (groups loss, lr, samples|tokens), judged on the "
                          "steps after the restore; without those lines it is not measured, and then the drill is "
                          "inconclusive. Unset: judged wherever the job prints any of them; false: never")
    matches_uninterrupted: UninterruptedSLO | None = Field(
        None, description="the job is run a second time, without the fault, to the last step the drill saw; the steps "
                          "after the restore must give the figures the uninterrupted run gave at those steps (loss, lr, "
                          "samples|tokens, digest on its step lines): exact, or within a tolerance. The steps before the "
                          "fault must agree too, or the job is not deterministic and the check is unknown")
    reach: ReachSLO | None = Field(None, description="a graded drill (grade:): the smallest level its detector "
                                                     "catches, and its false blames with no fault on")
    limits: dict[str, Limit] = Field(default_factory=dict, description="absolute limits on any measurement")
    regression: dict[str, float] = Field(
        default_factory=dict,
        description="measurement -> allowed relative worsening against the median of the last passing runs, beyond "
                    "their own spread (0.2 = 20%; judging/checks/baseline.py)")
    project: ProjectSLO | None = None
    """fail when this recovery would push fleet goodput under a floor"""
    cadence: CadenceSLO | None = None
    """the job's save interval against Daly's optimum"""

    @field_validator("limits", "regression")
    @classmethod
    def _known(cls, value: dict) -> dict:
        unknown = [k for k in value if k not in MEASUREMENTS]
        if unknown:
            raise ValueError(f"unknown measurement(s) {unknown}; known: {', '.join(MEASUREMENTS)}")
        return value


class StopCondition(Strict):
    """Stop the drill when the job's own metrics say it hurts more than planned: a PromQL query
    on the cluster's Prometheus (``prometheus:`` in its cluster entry), true when any series it
    returns is above or below a threshold, for at least ``for``. The drill heals at once and
    ends aborted (exit 4), naming the condition and the value seen."""

    prometheus: str = Field(min_length=1, description="a PromQL query (instant), e.g. "
                                                      "rate(train_steps_total[1m]) or an alert's ALERTS{...}")
    above: float | None = Field(None, description="true when a series' value is above this")
    below: float | None = Field(None, description="true when a series' value is below this (NaN counts as below "
                                                  "nothing and above nothing: a loss gone to NaN needs isnan-like "
                                                  "PromQL, e.g. loss != loss)")
    for_: Duration | None = Field(None, alias="for", description="how long it must hold (default: at once)")
    name: str | None = Field(None, description="what the condition is called in the report (default: the query)")

    @model_validator(mode="after")
    def _one_threshold(self) -> "StopCondition":
        if (self.above is None) == (self.below is None):
            raise ValueError("give above: X or below: X (one of them)")
        return self


class Abort(Strict):
    max_duration: Duration = 600.0
    """the drill is aborted (exit 4, healed) when it runs longer than this"""
    when: list[StopCondition] = Field(default_factory=list)
    """stop conditions on the job's own metrics (Prometheus): any one true for its ``for`` aborts the drill"""
    check_every: Duration = Field(5.0, description="how often the stop conditions are evaluated")


FaultClass = Literal["fail-stop", "fail-hang", "fail-slow", "recovery-path"]


class BlastRadius(Strict):
    """How much of the job one drill may hit; a selection over a limit is refused before
    anything is touched."""

    max_ranks: int = Field(4, ge=1, description="ranks a fault may target")
    max_nodes: int = Field(1, ge=1, description="nodes those ranks may be on")
    max_share: float = Field(0.5, gt=0, le=1, description="share of the job's ranks")


class Defect(Strict):
    """A published recovery-path defect that a drill reproduces (``drills/known-defects/``):
    the drill's own job is the affected setup; ``fixed`` names the profile with the fix."""

    id: str = Field(pattern=r"^[\w.-]+(/[\w.-]+)?#\d+$",
                    description="where it was reported: repo#N or owner/repo#N")
    url: str = Field(pattern=r"^https://", description="the issue or pull request")
    title: str
    """the defect in words an on-call engineer would recognise"""
    stack: str
    """the stack it lives in (transformers, torch, orbax, ...)"""
    version: str
    """the version(s) the report gives, and the one drilled"""
    reproduced: Literal["at-version", "same-mechanism"]
    """at-version: the stack itself at an affected version; same-mechanism: a job that does what the affected code did"""
    mechanism: str = ""
    """how the job reproduces it (same-mechanism: what it does as the affected code did)"""
    signature: str | None = Field(None, description="a regex the job's own error lines match when the defect is "
                                                    "what failed the drill (named in the verdict)")
    check: str | None = Field(None, description="the SLO whose failure is the defect's mark, where the job prints "
                                                "no error (a hang, a silent wrong restore): e.g. restore_matches_save")
    mark: str | None = Field(None, description="a known mechanism of a restart that never came back "
                                               "(judging/checks/mechanisms.py, e.g. torchrun-shared-store) whose mark in "
                                               "the evidence names the defect: the job's error lines or the restarted "
                                               "ranks' stuck frames")
    fixed: str | None = None
    """the job profile with the fix or workaround, which passes; none where no fix exists"""
    fix: str = ""
    """what the fix does"""

    @field_validator("signature")
    @classmethod
    def _signature(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regex: {exc}") from None
        return value

    @model_validator(mode="after")
    def _evidence(self) -> "Defect":
        if self.signature is None and self.check is None and self.mark is None:
            raise ValueError("a defect needs its evidence: signature (a regex on the job's error lines), check "
                             "(the SLO whose failure marks it) or mark (a known mechanism)")
        return self


class DrillSpec(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """the drill's name (drill run NAME)"""
    class_: FaultClass = Field(alias="class")
    """fail-stop, fail-hang, fail-slow or recovery-path"""
    summary: str
    """one line: what the drill breaks"""
    runbook: str | None = None
    """the runbook a failed drill points to (runbooks/NAME.md)"""
    job: str | None = None
    """the job profile (default: the config's default_job); --job overrides it"""
    fault: FaultSpec
    """what is broken, where and when"""
    steady: Steady = Field(default_factory=Steady)
    """what the job must do before the fault"""
    observe: Observe = Field(default_factory=Observe)
    """how long the drill watches the recovery"""
    slo: SLO = Field(default_factory=SLO)
    """what the checkers judge"""
    abort: Abort = Field(default_factory=Abort)
    """the drill's safeguard"""
    blast_radius: BlastRadius = Field(default_factory=BlastRadius)
    """how much of the job one drill may hit"""
    defect: Defect | None = None
    """the published defect this drill reproduces (drills/known-defects/)"""
    grade: Grade | None = None
    """run as a graded sweep of one fault parameter, judged by slo.reach (drill run and drill gate)"""

    @model_validator(mode="after")
    def _reach_needs_grade(self) -> "DrillSpec":
        if (self.slo.reach is None) != (self.grade is None):
            raise ValueError("slo.reach and grade go together: a graded drill is judged by its reach, and the "
                             "reach needs the levels grade: sweeps")
        if self.grade is not None and self.slo.reach is not None:
            orders = [_one_level(v, "grade.levels") for v in self.grade.levels]
            if not any(same_level(self.slo.reach.at_most_order, o) for o in orders):
                raise ValueError(f"slo.reach.at_most {self.slo.reach.at_most} is not one of the levels grade: sweeps "
                                 f"({', '.join(str(v) for v in self.grade.levels)}): the reach is judged at a level "
                                 "the sweep drills")
        return self


class SuiteEntry(Strict):
    drill: str
    """a drill by name or path"""
    job: str | None = None
    """this drill's job profile, over the suite's"""
    cluster: str | None = Field(None, description="this drill's cluster (kill-node needs one of 2+ nodes), over the "
                                                  "suite's; --cluster still overrides both")
    repeat: int = Field(1, ge=1, le=1000, description="run the drill this many times, a fresh job each time")
    min_pass_rate: float | None = Field(None, gt=0, le=1, description="with repeat: the share of runs that must "
                                                                      "pass (default: all)")
    known_defects: dict[str, str] = Field(
        default_factory=dict, description="drill compare: job profile -> a defect of that stack this drill FAILs on "
                                          "today (measured); such a FAIL is reported as known, not counted")


class SuiteSpec(Strict):
    """An ordered list of drills sharing a cluster and job (``drills/suites/*.yaml``)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """the suite's name"""
    description: str = ""
    """one line: what the suite gates"""
    cluster: str | None = None
    """where its drills run (--cluster overrides it)"""
    job: str | None = None
    """the job profile its drills run against (--job overrides it)"""
    stop_on_failure: bool = False
    """stop at the first drill that does not pass"""
    max_regression: float | None = Field(
        None, ge=0, description="gate: allowed worsening of detect / first-step times vs the baseline")
    confirm: int = Field(0, ge=0, le=10, description="a drill that fails on regression SLOs alone is re-run up to "
                                                     "this many times; it fails only if every re-run regresses too")
    drills: list[str | SuiteEntry] = Field(min_length=1)
    """the drills, in order: names, or entries with their own job, cluster and repeat"""

    def entries(self) -> list[SuiteEntry]:
        return [SuiteEntry(drill=d) if isinstance(d, str) else d for d in self.drills]
