"""Drill results where SRE teams look: a real Prometheus scrapes reports/metrics.prom through
a real node-exporter's textfile collector and a real Pushgateway the drill pushed to, and the
numbers queried back are result.json's. promtool checks the metrics and unit-tests the
shipped alerting rules. A webhook (an HTTP server of the test's) hears of a FAIL and not of a
PASS. Everything listens on 127.0.0.1 only."""
from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.integration.cli import drill_cli
from tests.integration.promstack import BINARIES, PromStack, free_ports, missing
from tests.integration.ranks import NPROC

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
pytestmark = pytest.mark.skipif(bool(missing()), reason=f"needs Debian's {', '.join(missing())} (.ci/run installs "
                                                         "prometheus, prometheus-pushgateway, prometheus-node-exporter)")


@pytest.fixture
def webhook(tmp_path):
    """An HTTP server on 127.0.0.1 that keeps what is posted to it, named as the notify:
    webhook of a drill.yaml in the test's folder (where `drill` runs)."""
    posts: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 — http.server's name
            posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "drill.yaml").write_text(f"notify:\n  - webhook: http://127.0.0.1:{server.server_address[1]}/hook\n")
    yield posts
    server.shutdown()
    server.server_close()


def promtool(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([BINARIES["promtool"], *args], input=stdin, capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def test_the_shipped_alerting_rules_are_valid_and_fire_when_they_should():
    rules = ROOT / "monitoring" / "prometheus" / "drillbit-alerts.yml"
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts-test.yml", cwd=HERE / "prometheus")
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


@pytest.mark.slow
def test_a_drills_numbers_reach_prometheus_by_the_textfile_and_the_pushgateway(tmp_path, webhook):
    reports = tmp_path / "reports"
    with PromStack(tmp_path / "prom", reports) as stack:
        done = drill_cli("run", str(HERE / "drills" / "kill-rank-fast.yaml"), "--reports", str(reports),
                         "--pushgateway", stack.pushgateway, "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout)
        assert result["verdict"] == "pass" and webhook == []  # notify: by default not told of a pass
        text = (reports / "metrics.prom").read_text()
        lint = promtool("check", "metrics", stdin=text)
        assert lint.returncode == 0, lint.stdout + lint.stderr

        where = f'drill="kill-rank-fast",job_profile="{result["job"]}",cluster="{result["cluster"]}",fault="kill-rank"'
        # the textfile through node-exporter (job="node"), the push through the Pushgateway
        # (honor_labels: job="drillbit", its grouping key)
        series = stack.wait_for(f"drillbit_time_to_first_step_seconds{{{where}}}", count=2)
        assert sorted(s["metric"]["job"] for s in series) == ["drillbit", "node"]
        for s in series:
            assert float(s["value"][1]) == pytest.approx(result["measurements"]["time_to_first_step"])
        [lost] = stack.query(f'drillbit_lost_steps{{{where},job="node"}}')
        assert int(float(lost["value"][1])) == result["measurements"]["lost_steps"]
        [verdict] = stack.query(f'drillbit_verdict{{{where},job="node",drillbit_verdict="pass"}}')
        assert verdict["value"][1] == "1"
        [runs] = stack.query(f'drillbit_runs_total{{{where},job="node",verdict="pass"}}')
        assert runs["value"][1] == "1"
        slos = stack.query(f'drillbit_slo_status{{{where},job="node",drillbit_slo_status="pass"}} == 1')
        assert sorted(s["metric"]["slo"] for s in slos) == sorted(
            s["name"] for s in result["slos"] if s["status"] == "pass")
        # a bounded label set: no run id, no timestamp, no folder among the labels
        assert set(series[0]["metric"]) <= {"__name__", "drill", "job_profile", "cluster", "fault", "job", "instance"}
        # every query of the shipped Grafana dashboard is PromQL this Prometheus answers, and
        # the verdict and detection panels find this run
        dashboard = json.loads((ROOT / "monitoring" / "grafana" / "drillbit-dashboard.json").read_text())
        answered = {}
        for panel in dashboard["panels"]:
            for t in panel["targets"]:
                expr = t["expr"]
                for var in ("$drill", "$cluster", "$job_profile"):
                    expr = expr.replace(var, ".*")
                answered[(panel["title"], t["refId"])] = stack.query(expr)
        assert answered[("Latest verdict of each drill", "A")][0]["value"][1] == "0"
        assert answered[("Time to detect", "A")] and answered[("Days since the last drill, per cluster", "A")]

    exported = drill_cli("results", "--db", str(reports / "drills.db"), "--openmetrics", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(exported.stdout)}
    assert families["drillbit_runs"].type == "counter" and families["drillbit_verdict"].type == "stateset"
    [sample] = families["drillbit_time_to_first_step_seconds"].samples
    assert sample.value == pytest.approx(result["measurements"]["time_to_first_step"])


@pytest.mark.slow
def test_a_fail_is_told_to_the_webhook_with_its_reasons_and_report(tmp_path, webhook):
    reports = tmp_path / "reports"
    done = drill_cli("run", str(HERE / "drills" / "kill-rank-fast.yaml"), "--job", "reference-norestarts",
                     "--reports", str(reports), "--json", cwd=tmp_path)
    result = json.loads(done.stdout)
    assert done.returncode == 1 and result["verdict"] == "fail", result["reasons"]
    [post] = webhook
    assert (post["drill"], post["verdict"], post["exit_code"]) == ("kill-rank-fast", "fail", 1)
    assert post["reasons"] == result["reasons"] and post["job"] == "reference-norestarts"
    assert Path(post["report"]).is_file() and Path(post["run_folder"]).parent == reports
    [sent] = [json.loads(line) for line in (Path(post["run_folder"]) / "notifications.jsonl").read_text().splitlines()]
    assert sent["sent"] and sent["status"] == 204


LOOP = HERE / "jobs" / "own_loop.py"


def own_loop_config(tmp_path: Path, metrics_port: int, prometheus: str) -> None:
    """The user's own loop (own_loop.py: torchrun, 3 ranks, drillbit.job), its counters on
    /metrics at metrics_port + rank, and a cluster that names the Prometheus scraping them."""
    import sys

    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", NPROC, "--max-restarts", "3",
               "--monitor-interval", "0.5", str(LOOP), "--ckpt", "{run_dir}/ckpt"]
    job = {"presets": ["drillbit", "torchrun"],
           "launch": {"command": command, "env": {"DRILLBIT_EVENTS": "{run_dir}/events.log",
                                                  "DRILLBIT_METRICS_PORT": str(metrics_port)}},
           "ranks": {"cmdline": "own_loop\\.py", "exclude_cmdline": "torch\\.distributed\\.run"},
           "logs": ["{run_dir}/events.log", "{run_dir}/job.out"]}
    cluster = {"engine": "process", "prometheus": prometheus}
    (tmp_path / "drill.yaml").write_text(json.dumps({"clusters": {"watched": cluster}, "jobs": {"own": job}}))


STOPPED = """
name: stall-with-a-brake
class: fail-hang
summary: rank 0 stopped; the drill stops when a rank's metrics endpoint stops answering
fault:
  type: hang-collective
  targets: {ranks: [0]}
  params: {method: sigstop}
  trigger: {at_step: 10}
steady: {warmup_steps: 3}
observe: {until_steps_after_recovery: 5, window: 90s}
slo: {detect_within: 60s}
abort:
  max_duration: 3m
  check_every: 0.5s
  when:
    - prometheus: min(up{job="own-loop"})
      below: 1
      name: a rank's /metrics stopped answering
"""


@pytest.mark.slow
def test_a_stop_condition_from_the_jobs_own_metrics_aborts_the_drill_and_heals(tmp_path):
    base = free_ports(4)
    # own_loop reports from rank 0 only: its /metrics is the one scraped
    with PromStack(tmp_path / "prom", tmp_path / "textfiles", targets={"own-loop": [base]}) as stack:
        own_loop_config(tmp_path, base, stack.prometheus)
        (tmp_path / "stall.yaml").write_text(STOPPED)
        done = drill_cli("run", "stall.yaml", "--cluster", "watched", "--job", "own", "--reports",
                         str(tmp_path / "reports"), "--json", cwd=tmp_path)
        result = json.loads(done.stdout)
        assert done.returncode == 4 and result["verdict"] == "aborted", (result["reasons"], done.stderr[-2000:])
        [reason] = [r for r in result["reasons"] if "stop condition" in r]
        assert "a rank's /metrics stopped answering below 1" in reason and "was 0" in reason, result["reasons"]
        [heal] = result["fault"]["heals"]
        assert result["fault"]["healed"] and heal["verified"], heal  # SIGCONT, and the rank seen running again
        run_dir = next((tmp_path / "reports").glob("*-stall-with-a-brake"))
        history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
        kinds = [e["kind"] for e in history]
        # armed before the launch; fired by the fault (the stopped rank's endpoint), not before it
        assert kinds.index("stop.armed") < kinds.index("job.launch") < kinds.index("fault.inject") < kinds.index(
            "stop.fired") < kinds.index("fault.heal")
        fired = next(e for e in history if e["kind"] == "stop.fired")
        assert fired["data"]["value"] == 0 and fired["data"]["query"] == 'min(up{job="own-loop"})'


def test_a_stop_condition_that_cannot_be_read_is_refused_before_anything_runs(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    own_loop_config(tmp_path, 1, f"http://127.0.0.1:{closed}")
    (tmp_path / "stall.yaml").write_text(STOPPED)
    done = drill_cli("run", "stall.yaml", "--cluster", "watched", "--job", "own", "--reports",
                     str(tmp_path / "reports"), "--json", cwd=tmp_path)
    result = json.loads(done.stdout)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "stop conditions cannot be read" in result["error"] and f"127.0.0.1:{closed}" in result["error"]
    assert not (tmp_path / "reports").exists() or not list((tmp_path / "reports").glob("*/events.log"))


METRICS_LOOP = HERE / "jobs" / "metrics_loop.py"


def metrics_loop_config(tmp_path: Path, metrics_port: int, prometheus: str) -> None:
    """A job whose only progress signal is its train_step gauge on Prometheus; torchrun's own
    lines (its preset) say when it restarted."""
    import sys

    job = {"presets": ["torchrun"],
           "prometheus": [{"query": 'max by (rank) (train_step{job="metrics-loop"})', "kind": "step"}],
           "ranks": {"cmdline": "metrics_loop\\.py", "exclude_cmdline": "torch\\.distributed\\.run"},
           "logs": ["{run_dir}/job.out"]}
    jobs = {}
    for name, extra in (("resumes", []), ("starts-over", ["--no-resume"])):
        jobs[name] = {**job, "launch": {"command": [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", NPROC, "--max-restarts", "3",
            "--monitor-interval", "0.5", str(METRICS_LOOP), "--ckpt", "{run_dir}/ckpt", "--metrics-port",
            str(metrics_port), *extra], "env": {"LOGLEVEL": "INFO"}}}
    cluster = {"engine": "process", "prometheus": prometheus}
    (tmp_path / "drill.yaml").write_text(json.dumps({"clusters": {"watched": cluster}, "jobs": jobs}))


@pytest.mark.slow
def test_a_job_that_shows_its_steps_only_as_a_metric_is_drilled_from_prometheus(tmp_path):
    """kill-rank on a job whose steps drillbit reads from Prometheus alone: PASS when it
    resumes from its checkpoint, FAIL when the same loop starts over."""
    base = free_ports(4)
    with PromStack(tmp_path / "prom", tmp_path / "textfiles",
                   targets={"metrics-loop": [base + r for r in range(4)]}) as stack:
        metrics_loop_config(tmp_path, base, stack.prometheus)
        results = {}
        for job in ("resumes", "starts-over"):
            done = drill_cli("run", str(HERE / "drills" / "kill-rank-own-loop.yaml"), "--cluster", "watched",
                             "--job", job, "--reports", str(tmp_path / "reports"), "--json", cwd=tmp_path)
            results[job] = (done.returncode, json.loads(done.stdout))
    code, ok = results["resumes"]
    assert code == 0 and ok["verdict"] == "pass", ok["reasons"]
    m = ok["measurements"]
    assert m["restarts"] >= 1 and m["time_to_first_step"] is not None and m["lost_steps"] <= 5
    assert m["baseline_step_s"] > 0.5  # one scrape to the next: the resolution of a metric
    code, bad = results["starts-over"]
    assert code == 1 and bad["verdict"] == "fail", bad["reasons"]
    lost = next(s for s in bad["slos"] if s["name"] == "max_lost_steps")
    # it began again from step 1, seen a scrape later (a few steps on): still far below the fault's step
    assert lost["status"] == "fail" and bad["measurements"]["restored_step"] < bad["measurements"]["step_at_fault"] - 5
    run_dir = next((tmp_path / "reports").glob("*-kill-rank-own-loop"))
    history = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    steps = [e for e in history if e["kind"] == "step"]
    assert steps and all(e["source"] == "probe:prometheus" for e in steps)  # no step came from a log line
