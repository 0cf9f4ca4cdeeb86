"""``drill campaign SPEC``: one long job, many faults (src/drillbit/runs/campaign.py)."""
from __future__ import annotations

import click

from drillbit.entry.cli.common import emit_json, err, json_option, out, wait_option
from drillbit.judging.report.console import ConsoleUI


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--cluster", help="cluster name from drill.yaml (default: its default_cluster, else local)")
@click.option("--job", help="job profile (default: the campaign's, else reference)")
@click.option("--config", "config_path", help="drill.yaml path (default: ./drill.yaml or $DRILLBIT_CONFIG)")
@click.option("--reports", "reports_dir", help="where the run folder goes (default: reports/)")
@wait_option
@json_option
def campaign(spec: str, cluster: str | None, job: str | None, config_path: str | None, reports_dir: str | None,
             as_json: bool) -> int:
    """Run a campaign: launch the job once and inject its faults one after another as an
    arrival process; report each recovery, the time-to-recover distribution, the campaign's
    goodput, and what the fleet simulator predicted for it."""
    from drillbit.judging import exitcodes
    from drillbit.runs.campaign import execute, load_campaign, markdown
    from drillbit.spec.load import find_config
    from drillbit.faults.loading import load_config

    loaded = load_campaign(spec, load_config(find_config(config_path)))
    with ConsoleUI(err) as ui:
        report, run_dir = execute(loaded, cluster=cluster, job=job, config_path=config_path, reports_dir=reports_dir,
                                  ui=ui)
    if as_json:
        emit_json(report)
    else:
        out.print(markdown(report, report.get("predicted")), markup=False, highlight=False)
        out.print(f"campaign report: {run_dir}/campaign.md, campaign.html", markup=False)
    return exitcodes.exit_code(report["verdict"], report.get("error_kind"))


COMMANDS = [campaign]
