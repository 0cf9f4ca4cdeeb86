"""Loading a drill spec and drill.yaml with everything checked that the models alone cannot
see: a fault's type and params against the fault plugin's own Params, a job's presets
(they exist and load), the placeholders it uses, and the fleet scenarios an SLO names. It
sits above the faults, the presets and the fleet simulator; the YAML reading and the
models' validation it builds on are ``drillbit.spec``.
"""
from __future__ import annotations

import os

from pathlib import Path

from drillbit.core.errors import ConfigError, Problem, SpecError
from drillbit.faults import registry
from drillbit.judging.fleet.simulate import load_scenario
from drillbit.judging.probes.preset import load as load_preset
from drillbit.spec.config import DrillConfig, JobProfile, with_builtins
from drillbit.spec.levels import level_problems, parse_levels
from drillbit.spec.load import Loc, line_of, loc_text, suggest, read_yaml, validate
from drillbit.spec.models import DrillSpec
from drillbit.spec.placeholders import PLACEHOLDERS, per_node_findings, unknown


def fault_problems(fault: dict, path: Path, lines: dict[Loc, int], loc: Loc) -> list[Problem]:
    """A fault entry's type (known to the registry) and params (valid for that fault), as
    problems at ``loc`` (``fault`` in a drill spec, ``faults.N`` in a campaign)."""
    if not isinstance(fault.get("type"), str):
        return []
    faults = registry()
    cls = faults.get(fault["type"])
    if cls is None:
        return [Problem(str(path), line_of(lines, loc + ("type",)), loc_text(loc + ("type",)),
                        f"unknown fault {fault['type']!r}" + suggest(fault["type"], list(faults)))]
    return validate(cls.Params, fault.get("params") or {}, path, lines, loc + ("params",))[1]

def _grade_problems(grade: dict, fault: dict, cls, path: Path, lines: dict[Loc, int]) -> list[Problem]:
    """A graded drill's parameter is the fault's (or duration), and every level one it takes."""
    param = grade["param"]
    if param != "duration" and param not in cls.Params.model_fields:
        return [Problem(str(path), line_of(lines, ("grade", "param")), "grade.param",
                        f"{fault['type']} has no parameter {param!r}"
                        + suggest(param, [*cls.Params.model_fields, "duration"]))]
    levels = grade.get("levels")
    if not isinstance(levels, list) or not levels or any(isinstance(v, bool) for v in levels):
        return []  # the spec's own validation says so
    try:
        _, parsed = parse_levels(f"{param}=" + ",".join(str(v) for v in levels))
    except ConfigError:
        return []  # said by the spec's own validation
    base: dict = fault["params"] if isinstance(fault.get("params"), dict) else {}
    return [Problem(str(path), line_of(lines, ("grade", "levels")), "grade.levels", f"{fault['type']}'s {param} {why}")
            for why in level_problems(cls.Params, base, param, parsed)]


def load_drill(path: Path, config: DrillConfig | None = None) -> DrillSpec:
    """Load and fully validate a drill spec, fault params and job reference included."""
    path = Path(path)
    data, lines = read_yaml(path)
    problems: list[Problem] = []
    if not isinstance(data, dict):
        raise SpecError([Problem(str(path), 1, "", "a drill spec is a mapping (name:, fault:, ...)")])
    spec, problems = validate(DrillSpec, data, path, lines)
    fault = data.get("fault") if isinstance(data.get("fault"), dict) else None
    if fault is not None:
        problems += fault_problems(fault, path, lines, ("fault",))
        grade = data.get("grade")
        cls = registry().get(fault.get("type")) if isinstance(fault.get("type"), str) else None
        if isinstance(grade, dict) and isinstance(grade.get("param"), str) and cls is not None:
            problems += _grade_problems(grade, fault, cls, path, lines)
    slo: dict = data["slo"] if isinstance(data.get("slo"), dict) else {}
    if data.get("grade") is not None and slo.get("matches_uninterrupted") is not None:
        problems.append(Problem(str(path), line_of(lines, ("slo", "matches_uninterrupted")), "slo.matches_uninterrupted",
                                "a graded drill is judged on its reach, segment by segment: there is no uninterrupted "
                                "run to compare a restore with (drop grade:, or this)"))
    for key in ("project", "cadence"):
        block: dict = slo[key] if isinstance(slo.get(key), dict) else {}
        name = block.get("scenario")
        if isinstance(name, str):
            try:
                load_scenario(name)
            except SpecError as exc:
                problems.append(Problem(str(path), line_of(lines, ("slo", key, "scenario")), f"slo.{key}.scenario",
                                        exc.problems[0].message))
    if config is not None and isinstance(data.get("job"), str) and data["job"] not in config.jobs:
        problems.append(Problem(str(path), line_of(lines, ("job",)), "job",
                                f"unknown job profile {data['job']!r}" + suggest(data["job"], list(config.jobs),
                                    "drill list --jobs")))
    if problems:
        raise SpecError(sorted(problems, key=lambda p: (p.line or 0, p.path)))
    return spec

def load_config(path: Path | None) -> DrillConfig:
    """drill.yaml (if any) merged over the built-in clusters and jobs."""
    if path is None:
        return with_builtins(DrillConfig())
    data, lines = read_yaml(Path(path))
    if not isinstance(data, dict) or not data:  # an empty file is a mistake, not "no settings"
        what = "empty" if data in (None, {}, "") else f"a {type(data).__name__}"
        raise SpecError([Problem(str(path), 1, "", f"{what}; a drill.yaml is a mapping (reports_dir:, clusters:, "
                                 "jobs:, ...); drop --config to use only the built-ins")])
    config, problems = validate(DrillConfig, data, Path(path), lines)
    if config is not None:
        for name, job in config.jobs.items():
            for loc, message in job_problems(job):
                loc = ("jobs", name) + loc
                problems.append(Problem(str(path), line_of(lines, loc), loc_text(loc), message))
        # folders the file names relative to itself: the same wherever drill runs from
        here = Path(path).resolve().parent
        folders: dict[str, str | None] = {}
        for key in ("reports_dir", "results_db"):
            value = getattr(config, key)
            try:
                # absolute, links NOT resolved here: a link planted on the way (in a shared folder) must
                # meet the trust walk where the folder is opened (drillbit.core.trust), not be followed
                # silently now; the run folder's own path is resolved there, once
                folders[key] = os.path.normpath(os.path.join(here, os.fsdecode(value))) if value else value
            except (ValueError, OSError, TypeError) as exc:
                problems.append(Problem(str(path), line_of(lines, (key,)), key, f"not a usable path: {exc}"))
        config = config.model_copy(update=folders)
    if problems:
        raise SpecError(problems)
    return with_builtins(config)

def job_problems(job: JobProfile) -> list[tuple[Loc, str]]:
    """What a job profile's model cannot see: presets that do not exist or do not load,
    placeholders drillbit does not fill, per-node placeholders in a launch that is not per node
    ({node_rank}, torchrun's --nnodes {nnodes}), and a job with no way to see its progress."""
    out: list[tuple[Loc, str]] = []
    signals = list(job.signals)
    for i, name in enumerate(job.presets):
        try:
            signals += load_preset(name).signals
        except SpecError as exc:
            out.append((("presets", i), "; ".join(p.message if p.file == name else str(p) for p in exc.problems)))
    texts: list[tuple[Loc, str]] = [(("logs", i), p) for i, p in enumerate(job.logs)]
    if job.launch is not None:
        texts += [(("launch", "command", i), a) for i, a in enumerate(job.launch.command)]
        texts += [(("launch", "env", k), v) for k, v in job.launch.env.items()]
        texts += [(("launch", "cwd"), job.launch.cwd)] if job.launch.cwd else []
    for key in ("heartbeat_file",):
        if getattr(job, key):
            texts.append(((key,), getattr(job, key)))
    if job.checkpoint is not None:
        texts.append((("checkpoint", "dir"), job.checkpoint.dir))
    if job.replacement is not None:
        texts.append((("replacement", "shim_dir"), job.replacement.shim_dir))
        texts += [(("replacement", "declare_dead", i), a) for i, a in enumerate(job.replacement.declare_dead or [])]
    if job.ranks.pidfiles:
        texts.append((("ranks", "pidfiles"), job.ranks.pidfiles))
    texts += [(("tiers", name, "dir"), spec.dir.replace("{rank}", "")) for name, spec in job.tiers.items()
              if hasattr(spec, "dir")]
    for loc, text in texts:
        bad = unknown(text)
        if bad:
            known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            out.append((loc, f"unknown placeholder {{{bad[0]}}}; drillbit fills {known}"))
    if job.launch is not None:
        out += per_node_findings(job.launch.command, job.launch.env, job.launch.per_node)[0]
    if not job.logs and (job.launch is None or not job.launcher_log) and not job.heartbeat_file and not job.prometheus:
        out.append((("logs",), "nothing to read: " + ("the job is attached to, and drillbit knows no output of its; "
                                                      if job.launch is None else "launcher_log is off, and ")
                    + "name the files the job logs to in logs"))
    if not any(s.kind == "step" for s in signals) and not job.heartbeat_file and \
            not any(p.kind == "step" for p in job.prometheus):
        out.append(((), "no step signal and no heartbeat_file: drillbit could not see the job make progress; add a "
                        "preset that reads its step lines, a `signals:` entry of kind step with a group n, a "
                        "heartbeat_file ('<step> <epoch>'), or a prometheus: signal of kind step"))
    return out


def config_warnings(path: Path) -> list[Problem]:
    """What drill.yaml's job profiles say that may not do what was meant, without being wrong
    (a launch told {nnodes} that starts on one node): said by drill validate, never refused."""
    data, lines = read_yaml(Path(path))
    jobs = data.get("jobs") if isinstance(data, dict) else None
    out: list[Problem] = []
    for name, raw in (jobs or {}).items() if isinstance(jobs, dict) else ():
        try:
            job = JobProfile.model_validate(raw)
        except ValueError:
            continue  # its problems are said by load_config
        if job.launch is None:
            continue
        for loc, message in per_node_findings(job.launch.command, job.launch.env, job.launch.per_node)[1]:
            loc = ("jobs", name) + loc
            out.append(Problem(str(path), line_of(lines, loc), loc_text(loc), message))
    return out
