"""The metrics drillbit writes (reports/metrics.prom, a Pushgateway, drill results
--openmetrics), from hand-built results in a real SQLite store: names in base units, state
sets for verdicts and SLOs, bounded labels, escaping, and a Pushgateway that fails changing
nothing."""
from __future__ import annotations

import shutil
import socket
import subprocess

import pytest

from drillbit.judging.report import metrics
from drillbit.runs.store import Store
from drillbit.runs.session import publish_metrics


def result(verdict: str = "pass", drill: str = "kill-rank", finished: str = "2026-12-01T10:00:00+00:00",
           **measurements) -> dict:
    return {"drill": drill, "cluster": "staging", "job": "reference", "verdict": verdict,
            "exit_code": {"pass": 0, "fail": 1, "inconclusive": 3, "aborted": 4}[verdict], "reasons": [],
            "started_at": "2026-12-01T09:59:00+00:00", "finished_at": finished,
            "fault": {"type": "kill-rank"},
            "measurements": {"time_to_detect": 1.5, "time_to_first_step": 12.25, "lost_steps": 4, "goodput": 0.97,
                             "observed_s": 30.0, "restarts": 1, "straggler_rank": 3, "expects": "crash",
                             "rejected_corrupted": True, "attribution": {"correct": False, "blamed": [0]},
                             "target_ranks": [2], **measurements},
            "slos": [{"name": "detect_within", "status": "pass"}, {"name": "first_step_within", "status": "fail"}]}


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "drills.db") as s:
        yield s


def samples(text: str) -> dict[str, str]:
    return {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in text.splitlines() if not line.startswith("#")}


L = 'drill="kill-rank",job_profile="reference",cluster="staging",fault="kill-rank"'


def test_the_latest_run_of_each_series_in_base_units_and_its_runs_by_verdict(store):
    store.record(result("pass", time_to_first_step=10.0), "/r/1")
    store.record(result("fail"), "/r/2")
    got = samples(metrics.from_store(store))
    assert got[f"drillbit_time_to_first_step_seconds{{{L}}}"] == "12.25"  # the latest run's
    assert got[f"drillbit_observed_seconds{{{L}}}"] == "30.0"
    assert got[f"drillbit_goodput_ratio{{{L}}}"] == "0.97"
    assert got[f"drillbit_lost_steps{{{L}}}"] == "4"
    assert got[f"drillbit_rejected_corrupted{{{L}}}"] == "1"
    assert got[f"drillbit_attribution_correct{{{L}}}"] == "0"
    assert got[f'drillbit_verdict{{{L},drillbit_verdict="fail"}}'] == "1"
    assert got[f'drillbit_verdict{{{L},drillbit_verdict="pass"}}'] == "0"
    assert got[f"drillbit_exit_code{{{L}}}"] == "1"
    assert got[f"drillbit_last_run_timestamp_seconds{{{L}}}"] == "1796119200.0"
    assert got[f'drillbit_slo_status{{{L},slo="first_step_within",drillbit_slo_status="fail"}}'] == "1"
    assert got[f'drillbit_runs_total{{{L},verdict="pass"}}'] == "1"
    assert got[f'drillbit_runs_total{{{L},verdict="fail"}}'] == "1"
    assert got[f'drillbit_runs_total{{{L},verdict="aborted"}}'] == "0"
    # identifiers and words are not quantities; nothing names a run
    assert not any(k.startswith(("drillbit_straggler_rank", "drillbit_expects", "drillbit_target_ranks")) for k in got)
    assert not any("/r/" in k or "run" in k.split("{")[1] for k in got)


def test_each_drill_job_and_cluster_is_its_own_series_and_the_store_may_be_filtered(store):
    store.record(result("pass"), "/r/1")
    store.record(result("pass", drill="stall-nccl"), "/r/2")
    text = metrics.from_store(store)
    assert text.count("drillbit_exit_code{") == 2
    assert 'drill="stall-nccl"' not in metrics.from_store(store, drill="kill-rank")


def test_label_values_are_escaped_and_odd_numbers_written_as_prometheus_reads_them(store):
    store.record(result("pass", drill='a "quoted"\\drill\nname', time_to_detect=float("nan")), "/r/1")
    text = metrics.from_store(store)
    assert 'drill="a \\"quoted\\"\\\\drill\\nname"' in text
    assert "drillbit_time_to_detect_seconds{" in text and text.split("drillbit_time_to_detect_seconds{")[1].split(
        "\n")[0].endswith(" NaN")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs Debian's prometheus (promtool)")
def test_promtool_finds_nothing_to_lint(store):
    store.record(result("fail"), "/r/1")
    store.record(result("pass", drill="stall-nccl"), "/r/2")
    lint = subprocess.run(["promtool", "check", "metrics"], input=metrics.from_store(store), capture_output=True,
                          text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_openmetrics_declares_state_sets_units_and_ends_with_eof(store):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    store.record(result("pass"), "/r/1")
    text = metrics.from_store(store, openmetrics=True)
    assert text.endswith("# EOF\n") and "# UNIT drillbit_time_to_first_step_seconds seconds" in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["drillbit_verdict"].type == "stateset" and families["drillbit_runs"].type == "counter"
    assert families["drillbit_goodput_ratio"].unit == "ratio"


def test_the_textfile_is_written_whole_for_node_exporter_and_a_dead_pushgateway_only_said(tmp_path, store, capsys):
    store.record(result("fail"), "/r/1")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    publish_metrics(tmp_path, store, f"http://127.0.0.1:{port}")
    prom = tmp_path / "metrics.prom"
    assert prom.read_text() == metrics.from_store(store)
    assert oct(prom.stat().st_mode & 0o777) == "0o644"  # node-exporter reads it as another user
    assert not list(tmp_path.glob(".metrics.prom*"))
    assert f"the Pushgateway did not take the metrics: http://127.0.0.1:{port}" in capsys.readouterr().err


def test_the_baseline_band_of_the_last_passing_runs_is_exported(store):
    for first in (10.0, 12.0, 11.0, 30.0):
        store.record(result("pass" if first < 30 else "fail", time_to_first_step=first), "/r")
    got = samples(metrics.from_store(store))
    # the passing runs only (10, 12, 11): median 11, MAD 1, band 11 ± 3 · 1.4826
    assert got[f'drillbit_baseline_time_to_first_step_seconds{{{L},bound="median"}}'] == "11.0"
    assert float(got[f'drillbit_baseline_time_to_first_step_seconds{{{L},bound="high"}}']) == pytest.approx(15.4478)
    assert float(got[f'drillbit_baseline_time_to_first_step_seconds{{{L},bound="low"}}']) == pytest.approx(6.5522)
    assert f'drillbit_baseline_goodput_ratio{{{L},bound="median"}}' in got


def test_the_history_backfills_each_run_at_its_time_held_until_the_next(store, tmp_path):
    store.record(result("pass", finished="2026-12-01T10:00:00+00:00", time_to_first_step=10.0), "/r/1")
    store.record(result("fail", finished="2026-12-01T10:10:00+00:00", time_to_first_step=50.0), "/r/2")
    t1, t2 = 1796119200.0, 1796119800.0
    text = metrics.history(store, until=t2 + 100)
    assert text.endswith("# EOF\n")
    first = [line for line in text.splitlines() if line.startswith("drillbit_time_to_first_step_seconds{")]
    # run 1 at 10:00, held at +4 and +8 min, then run 2 at 10:10, held once more before `until`
    assert [line.split()[-2:] for line in first] == [["10.0", f"{t1:.3f}"], ["10.0", f"{t1 + 240:.3f}"],
                                                      ["10.0", f"{t1 + 480:.3f}"], ["50.0", f"{t2:.3f}"]]
    runs = [line.split()[-2:] for line in text.splitlines() if line.startswith("drillbit_runs_total{") and
            'verdict="fail"' in line]
    assert runs[0] == ["0", f"{t1:.3f}"] and runs[-1] == ["1", f"{t2:.3f}"]  # counted as the runs came
    if shutil.which("promtool"):
        (tmp_path / "h.om").write_text(text)
        made = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "h.om"),
                               str(tmp_path / "tsdb")], capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stdout + made.stderr
