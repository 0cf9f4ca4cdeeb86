"""notify: webhooks told of a drill's result, posted to a real HTTP server on 127.0.0.1: only
the verdicts asked for (by default all but pass), drillbit's JSON or Slack's text, and a hook
that fails recorded by its host alone, never raised."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import ValidationError

from drillbit.runs.notify import notify_all
from drillbit.spec.config import DrillConfig, Notify


@pytest.fixture
def hook_server():
    got: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 — http.server's name
            data = self.rfile.read(int(self.headers["Content-Length"]))
            got.append({"path": self.path, "type": self.headers["Content-Type"], "body": json.loads(data)})
            status = 500 if self.path.startswith("/broken") else 200
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", got
    server.shutdown()
    server.server_close()


def payload(verdict: str) -> dict:
    return {"drill": "stall-nccl", "cluster": "staging", "job": "reference", "verdict": verdict,
            "exit_code": {"pass": 0, "fail": 1, "aborted": 4}[verdict], "error": None,
            "reasons": ["no step for 30 s after the fault; the stall was never detected"],
            "fault": {"type": "hang-collective"}, "started_at": "s", "finished_at": "f"}


def test_a_fail_is_posted_and_a_pass_is_not_by_default(tmp_path, hook_server):
    url, got = hook_server
    hooks = [Notify(webhook=f"{url}/hook/secret-token")]
    assert notify_all(hooks, payload("pass"), tmp_path) == []
    [record] = notify_all(hooks, payload("fail"), tmp_path)
    assert record["sent"] and record["status"] == 200
    [post] = got
    assert post["path"] == "/hook/secret-token" and post["type"] == "application/json"
    assert post["body"]["verdict"] == "fail" and post["body"]["exit_code"] == 1
    assert post["body"]["reasons"] == payload("fail")["reasons"]
    assert post["body"]["report"] == str(tmp_path / "report.html")
    recorded = (tmp_path / "notifications.jsonl").read_text()
    assert "secret-token" not in recorded and url.removeprefix("http://") in recorded


def test_slack_gets_text_with_the_reasons_and_the_served_report(tmp_path, hook_server):
    url, got = hook_server
    run_dir = tmp_path / "20261202-061033-stall-nccl"
    run_dir.mkdir()
    hook = Notify(webhook=f"{url}/slack", format="slack", send_on=["pass", "fail"],
                  report_url="https://drills.example/reports/")
    notify_all([hook], payload("pass"), run_dir)
    text = got[0]["body"]["text"]
    assert text.startswith("*drillbit PASS*: `stall-nccl` on staging / reference (exit 0)")
    assert "• no step for 30 s after the fault" in text
    assert text.endswith("report: https://drills.example/reports/20261202-061033-stall-nccl/report.html")


def test_a_hook_that_fails_is_recorded_and_nothing_raises(tmp_path, hook_server):
    url, _ = hook_server
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    records = notify_all([Notify(webhook=f"{url}/broken"), Notify(webhook=f"http://127.0.0.1:{closed}/x")],
                         payload("aborted"), tmp_path)
    assert [r["sent"] for r in records] == [False, False]
    assert records[0]["status"] == 500 and "HTTP 500" in records[0]["error"]
    assert "refused" in records[1]["error"].lower()
    assert len((tmp_path / "notifications.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("entry, why", [
    ({"webhook": "hooks.example/x"}, "an http:// or https:// URL"),
    ({"webhook": "https://h/x", "send_on": ["failed"]}, "send_on.0"),
    ({"webhook": "https://h/x", "format": "teams"}, "format"),
])
def test_a_notify_entry_that_cannot_work_is_refused(entry, why):
    with pytest.raises(ValidationError, match=why):
        DrillConfig.model_validate({"notify": [entry]})
