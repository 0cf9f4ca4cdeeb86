"""Reports, junit, suites, the gate's regression wiring, game-day review and runbooks."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
import xml.etree.ElementTree as ET

import pytest

from drillbit.judging.checks import check
from drillbit.core.errors import SpecError
from drillbit.runs.gameday import review_markdown
from drillbit.core.history import History
from drillbit.judging.report import junit, render
from drillbit.judging.report import result as result_json
from drillbit.judging.report.runbook import render_runbook
from drillbit.runs.session import resolve
from drillbit.spec.load import load_suite
from drillbit.faults.loading import load_config
from drillbit.runs.suite import SuiteRun, summary_markdown, with_regression
from tests.unit.test_checks import kill_pass_history, spec

STEP_BLUE = (0x25, 0x63, 0xEB)


def payload_for(history: History, verdict_spec=None) -> dict:
    s = verdict_spec or spec()
    return result_json.build(drill="kill-rank", cluster="local", job="reference", fault_type="kill-rank",
                             params={"signal": "SIGKILL"}, history=history, result=check(s, history))


def failing_payload() -> dict:
    return payload_for(kill_pass_history(), spec(detect_within=0.1))


def test_junit_marks_failing_drill_with_its_reason():
    xml = junit.to_xml("drillbit.pre-deploy", [payload_for(kill_pass_history()), failing_payload()])
    root = ET.fromstring(xml)
    suite = root.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    failure = root.findall(".//testcase")[1].find("failure")
    assert "detection took 0.2 s" in failure.get("message")


def test_markdown_and_html_reports(tmp_path):
    history = kill_pass_history()
    payload = payload_for(history)
    render.write_all(tmp_path, payload, history)
    md = (tmp_path / "report.md").read_text()
    assert "# kill-rank — PASS" in md and "| detect_within | 60.0 | 0.2 |" in md
    html = (tmp_path / "report.html").read_text()
    assert "<svg" in html and 'class="steps"' in html and "restore +5.8s" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # self-contained


def test_html_is_autoescaped(tmp_path):
    history = kill_pass_history()
    payload = payload_for(history)
    payload["reasons"] = ["<script>alert(1)</script>"]
    html = render.html(payload, history)
    assert "<script>alert(1)" not in html and "&lt;script&gt;" in html


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _screenshot(page: Path, size: str) -> list[tuple[int, ...]]:
    """``page`` rendered by headless Chromium, as RGB pixels."""
    from PIL import Image

    shot = page.with_name("shot.png")
    subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={page.parent / 'profile'}", f"--window-size={size}",
                    f"--screenshot={shot}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    raw = Image.open(shot).convert("RGB").tobytes()
    return [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3)]


@pytest.mark.slow  # a headless chromium: seconds
@pytest.mark.skipif(_chromium() is None, reason="Debian chromium not installed (.ci/run installs it)")
def test_html_report_renders_timeline_in_headless_chromium(tmp_path):
    history = kill_pass_history()
    render.write_all(tmp_path, payload_for(history), history)
    pixels = _screenshot(tmp_path / "report.html", "1000,700")
    blue = sum(1 for p in pixels if all(abs(a - b) < 40 for a, b in zip(p, STEP_BLUE, strict=False)))
    shaded = sum(1 for p in pixels if all(abs(a - b) < 12 for a, b in zip(p, (0xFE, 0xCA, 0xCA), strict=False)))
    distinct = len(set(pixels[:: 7]))
    assert distinct > 20, "the page rendered blank"
    assert blue > 500, f"the step line is not drawn ({blue} step-blue pixels)"
    assert shaded > 100, f"the badput shading is not drawn ({shaded} pixels)"


def test_suite_catalogue_and_errors(tmp_path):
    config = load_config(None)
    suite = load_suite("pre-deploy", config)
    assert [e.drill for e in suite.entries()] == ["kill-rank", "stall-nccl"]
    bad = tmp_path / "s.yaml"
    bad.write_text("name: s\ndrills:\n  - kill-rank\n  - kil-rank\n  - {drill: stall-nccl, job: nope}\n")
    with pytest.raises(SpecError) as info:
        load_suite(str(bad), config)
    text = str(info.value)
    assert "s.yaml:4: drills.1: unknown drill 'kil-rank' (did you mean 'kill-rank'?)" in text
    assert "s.yaml:5: drills.2: unknown job profile 'nope'" in text


def test_gate_adds_default_regression_without_overriding_the_drill():
    resolved = resolve("kill-rank")
    gated = with_regression(resolved, 0.2)
    assert gated.spec.slo.regression == {"time_to_detect": 0.2, "time_to_first_step": 0.2}
    assert resolved.spec.slo.regression == {}  # the original is untouched
    assert with_regression(resolved, None) is resolved


def test_summary_and_review(tmp_path):
    config = load_config(None)
    suite = load_suite("game-day", config)
    run = SuiteRun(suite=suite, cluster="local", results=[failing_payload()], run_dirs=[tmp_path],
                   skipped=["stall-nccl"])
    assert run.verdict == "fail" and run.exit_code == 1
    md = summary_markdown(run, "Recovery gate")
    assert "❌ FAIL" in md and "detection took 0.2 s" in md and "| stall-nccl | | skipped |" in md
    review = review_markdown(run, {"kill-rank": resolve("kill-rank")}, [tmp_path])
    assert "| detected | ≤ 60s | +0.2s |" in review
    assert "- [ ] stall-nccl: skipped at the prompt" in review


def test_runbook_renders_with_last_result():
    s = resolve("stall-nccl").spec
    text = render_runbook(s, {"verdict": "fail", "cluster": "local", "job": "reference-nowatchdog",
                              "started_at": "today", "reasons": ["the stall was never detected"],
                              "measurements": {"time_to_detect": None, "time_to_first_step": None, "lost_steps": None}})
    assert "FAIL on local / reference-nowatchdog" in text and "the stall was never detected" in text
    assert "detect_within: 60.0" in text
    assert "never run on this store" in render_runbook(s, None)


def test_html_measurements_carry_units_not_four_bare_decimals():
    from drillbit.judging.report.render import measured

    assert measured(0.53412, "time_to_detect") == "0.53 s"
    assert measured(0.9712, "goodput") == "97.12 %"
    assert measured(5, "lost_steps") == "5 steps"
    assert measured(15, "restored_step") == "15"
    assert measured(None, "time_to_restart") == "—"


def test_timeline_labels_of_close_marks_do_not_overlap():
    import re

    from drillbit.core.history import History
    from drillbit.judging.report.timeline import timeline_svg

    rows = [(100.0, "drill.start"), (100.1, "job.launch")]
    rows += [(100.0 + 0.25 * i, "step", {"n": i}) for i in range(1, 41)]
    rows += [(110.05, "fault.confirmed", {"expects": "crash"}), (110.2, "detect"), (113.0, "restart"),
             (115.0, "restore", {"step": 30, "path": "p"})]
    rows += [(115.3 + 0.25 * i, "step", {"n": 30 + i}) for i in range(1, 12)]
    rows += [(119.0, "observe.end")]
    svg = timeline_svg(History.build(rows))
    labels = re.findall(r'class="mark-label" x="([\d.]+)" y="([\d.]+)"[^>]*text-anchor="(\w+)">([^<]+)<', svg)
    assert {text.split(" +")[0] for *_, text in labels} >= {"fault", "detect", "restore", "first step"}
    boxes = []
    for x, y, anchor, text in labels:
        w = 7.0 * len(text)
        lo = float(x) - w if anchor == "end" else float(x)
        boxes.append((lo, lo + w, float(y)))
    for i, (a0, a1, ay) in enumerate(boxes):
        for b0, b1, by in boxes[i + 1:]:
            assert ay != by or a1 < b0 or b1 < a0, (boxes, labels)


def test_every_mark_on_the_timeline_is_its_measurement():
    """The quickstart's report once marked "restart +2.0s" (torchrun's own line, the first
    restart event) beside a table saying time_to_restart 3.56 s (the job's line: a launcher's
    count only when the job prints none). The chart draws the measurements, not its own picks."""
    import re

    from drillbit.judging.checks.recovery import measure
    from drillbit.core.history import History
    from drillbit.judging.report.timeline import timeline_svg

    rows = [(100.0, "drill.start"), (100.1, "job.launch"), (101.0, "steady", {"baseline_step_s": 0.25})]
    rows += [(100.0 + 0.25 * i, "step", {"n": i}) for i in range(1, 41)]
    rows += [(110.05, "fault.inject"), (110.06, "fault.confirmed", {"expects": "crash"}),
             (110.3, "detect", {"by": "torchrun"}), (112.06, "restart", {"attempt": 1, "by": "torchrun"}),
             (113.62, "restart", {"attempt": 1}), (114.5, "restore", {"step": 30, "path": "p", "seconds": 0.4})]
    rows += [(115.3 + 0.25 * i, "step", {"n": 30 + i}) for i in range(1, 12)]
    rows += [(119.0, "observe.end")]
    history = History.build(rows)
    m = measure(history)
    svg = timeline_svg(history, m)
    marks = {label: float(v) for label, v in re.findall(r'class="mark-label"[^>]*>([a-z ]+) \+([\d.]+)s<', svg)}
    expected = {"detect": m.time_to_detect, "restart": m.time_to_restart, "restore": m.time_to_restore,
                "first step": m.time_to_first_step}
    assert m.time_to_restart == pytest.approx(3.56)
    assert marks == {k: round(v, 1) for k, v in expected.items()}, (marks, expected)
    assert svg == timeline_svg(history)  # the same, measured here or handed over


@pytest.mark.slow  # a headless chromium: seconds
@pytest.mark.skipif(_chromium() is None, reason="Debian chromium not installed (.ci/run installs it)")
def test_trends_page_renders_runs_and_the_baseline_in_headless_chromium(tmp_path):
    from drillbit.runs.store import Store
    from drillbit.judging.report.trends import BAND, COLORS, page, rows_with_measurements

    with Store(tmp_path / "drills.db") as store:
        for i, (verdict, detect) in enumerate([("pass", 0.2), ("pass", 0.3), ("pass", 0.25), ("fail", 2.5),
                                                ("pass", 0.22), ("pass", 0.28)]):
            store.record({"drill": "kill-rank", "cluster": "local", "job": "reference", "verdict": verdict,
                          "measurements": {"time_to_detect": detect, "time_to_first_step": 6 + i % 2,
                                           "baseline_step_s": 0.25, "goodput": 0.9}}, f"r{i}")
        text = page(rows_with_measurements(store, 100))
    assert text.count("<svg") == 3 and "5 of 6 runs passed" in text and "<script" not in text
    (tmp_path / "trends.html").write_text(text)
    pixels = _screenshot(tmp_path / "trends.html", "1300,700")

    def near(hex_color: str, tol: int) -> int:
        rgb = tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
        return sum(1 for p in pixels if all(abs(a - b) < tol for a, b in zip(p, rgb, strict=False)))

    assert near(COLORS["pass"], 30) > 200, "the passing runs' dots are not drawn"
    assert near(COLORS["fail"], 30) > 40, "the failing run's dot is not drawn"
    assert near(BAND, 6) > 500, "the baseline band is not shaded"


def test_result_json_is_a_typed_run_result_and_reads_back(tmp_path):
    from drillbit.judging.report.result import RunResult, write

    payload = failing_payload()
    write(tmp_path, payload)
    back = RunResult.load(tmp_path / "result.json")
    assert back.verdict == "fail" and back.exit_code == 1 and back.fault.type == "kill-rank"
    assert back.payload()["slos"] == payload["slos"] and list(back.payload()) == list(payload)
    broken = dict(payload, verdict="maybe")
    import pytest as _pytest
    from pydantic import ValidationError

    with _pytest.raises(ValidationError):
        RunResult.model_validate(broken)


def test_the_prediction_from_the_jobs_timeouts_sits_beside_the_measurement():
    import io

    from rich.console import Console

    from drillbit.judging.report.console import summary

    h = kill_pass_history()
    predicted = History.build([(h.first("drill.start").t + 0.01, "predicted",
                                {"detect_s": 0.5, "by": "monitor_interval", "why": "…"})])
    history = History(events=sorted([*h, *predicted], key=lambda e: e.t))
    payload = payload_for(history)
    m = payload["measurements"]
    assert (m["predicted_detect_s"], m["predicted_by"], m["time_to_detect"]) == (0.5, "monitor_interval", 0.2)
    out = io.StringIO()
    summary(Console(file=out, width=200), payload, "run")
    assert "detection predicted from the job's timeouts: within 0.5 s by its monitor interval; measured 0.20 s" \
        in out.getvalue()
    assert "Detection predicted from the job's timeouts: within 0.5 s, by its monitor interval; measured: 0.2 s" \
        in render.markdown(payload)
