"""``drill probe --job NAME``: onboard a job (launch or attach, watch, touch nothing)."""
from __future__ import annotations


import click
from rich.table import Table

from drillbit.judging import exitcodes
from drillbit.entry.cli.common import drills_option, emit_json, err, json_option, listing, out, wait_option


@click.command()
@click.option("--job", required=True, help="job profile to probe")
@click.option("--cluster", help="cluster name from drill.yaml (default: its default_cluster, else local)")
@click.option("--config", "config_path", help="drill.yaml path (default: ./drill.yaml or $DRILLBIT_CONFIG)")
@drills_option
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True, help="stop after this many steps")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
              help="stop after this long, steps or not")
@click.option("--reports", "reports_dir", help="where the probe's run folder goes (default: reports/)")
@wait_option
@json_option
def probe(job: str, cluster: str | None, config_path: str | None, steps: int,
          seconds: float, reports_dir: str | None, as_json: bool) -> int:
    """Start the job (or attach to it, with attach_pid) and watch it without touching it: the
    ranks found, every signal that fired, the step time, its checkpoints, and which drills of
    the catalogue it can run. The job it launched is stopped at the end. Exits 2 when no step
    signal fired (drillbit could not see the job make progress)."""
    from drillbit.runs.onboard import load_drills, probe as run_probe
    from drillbit.runs.session import new_run_dir
    from drillbit.spec.load import choose, find_config
    from drillbit.faults.loading import load_config

    config = load_config(find_config(config_path))
    # a protected cluster is refused by the probe itself, with its own words
    cluster_name = choose(config, cluster, job, refuse_protected=False)
    from pathlib import Path

    run_dir = new_run_dir(Path(reports_dir or config.reports_dir), f"probe-{job}")
    with err.status("probing") as spinner:
        found = run_probe(cluster_name, config.clusters[cluster_name], job, config.jobs[job], run_dir,
                          load_drills(config), steps=steps, seconds=seconds,
                          status=lambda text: spinner.update(text) if not as_json else None,
                          waiting=lambda text: err.print(f"drillbit: {text}", markup=False, highlight=False))
    if as_json:
        emit_json(found)
    else:
        show(found)
    return exitcodes.PASS if found["step_signal_fired"] else exitcodes.USAGE


def show(f: dict) -> None:
    out.print(f"[bold]job {f['job']}[/] on cluster {f['cluster']}: watched {f['watched_s']} s, "
              f"{f['lines']} log line(s), {f['steps_seen']} step(s)"
              + (f", step time {f['step_time_s'] * 1000:.0f} ms" if f["step_time_s"] else "")
              + (f"; the job exited with code {f['job_exit_code']}" if f["job_exit_code"] is not None else ""))
    out.print("ranks: " + ("; ".join(f"{node}: {ranks}" for node, ranks in f["ranks"].items()) or "none found"),
              markup=False)
    for log in f["logs"]:
        if not log["exists"]:
            out.print(f"log not found: {log['path']}", markup=False)
    table = Table(title="signals", show_edge=False)
    for col in ("signal", "from", "count", "per s", "sample → fields"):
        table.add_column(col, overflow="fold")
    for s in f["signals"]:
        sample = f"{s['sample']}\n→ {s['fields']}" if s["sample"] else "-"
        table.add_row(s.get("label") or s["kind"], s["source"], str(s["count"]), str(s["per_s"] or 0), sample)
    out.print(table)
    if f["unmatched_sample"]:
        out.print("no step signal fired; the first lines that matched nothing:", markup=False)
        for line in f["unmatched_sample"]:
            out.print(f"  {line}", markup=False, highlight=False)
    ck = f["checkpoints"]
    if ck is None:
        out.print("checkpoints: none described (checkpoint: {dir, layout} in the profile)", markup=False)
    else:
        out.print(f"checkpoints: {ck['count']} in {ck['dir']} (layout {ck['layout']})", markup=False)
        if f.get("saves_seen") is not None:
            out.print(f"saves seen while probing: {f['saves_seen']}", markup=False)
        for c in ck["found"]:
            done = {True: "complete", False: "INCOMPLETE", None: "completeness unknown"}[c["complete"]]
            out.print(f"  step {c['step']}: {c['path']} ({done}; {len(c['data'])} data file(s))", markup=False)
    out.print(listing(("drill", "fault", "ready", "missing"),
                      [[name, d["fault"], "yes" if d["ready"] else "no", "; ".join(d["missing"]) or "-"]
                       for name, d in f["catalogue"].items()], title="drills"))
    if not f["step_signal_fired"]:
        err.print("no step signal fired: add a preset or a `signals:` entry of kind step that matches the job's "
                  "step lines (see the unmatched lines above)", markup=False)


COMMANDS = [probe]
