"""Webhooks told of a drill's result (``notify:`` in drill.yaml): by default only a fail, an
inconclusive or an aborted run, with its reasons and where its report is. Each post is
recorded in the run folder (``notifications.jsonl``: the webhook's host, never its URL, which
holds a Slack hook's secret); a post that fails is recorded and said, and never changes the
verdict or the exit code."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from drillbit.spec.config import Notify

MARK = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE", "aborted": "ABORTED"}


def report_link(hook: Notify, run_dir: Path) -> str:
    if hook.report_url:
        return f"{hook.report_url.rstrip('/')}/{urllib.parse.quote(run_dir.name)}/report.html"
    return str(run_dir / "report.html")


def body(hook: Notify, payload: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    link = report_link(hook, run_dir)
    if hook.format == "slack":
        head = (f"*drillbit {MARK.get(payload['verdict'], payload['verdict'])}*: `{payload['drill']}` on "
                f"{payload['cluster']} / {payload['job']} (exit {payload['exit_code']})")
        reasons = payload.get("reasons") or ([payload["error"]] if payload.get("error") else [])
        lines = [head, *[f"• {r}" for r in reasons[:10]], f"report: {link}"]
        return {"text": "\n".join(lines)}
    return {"source": "drillbit", "drill": payload["drill"], "cluster": payload["cluster"], "job": payload["job"],
            "fault": (payload.get("fault") or {}).get("type"), "verdict": payload["verdict"],
            "exit_code": payload["exit_code"], "reasons": payload.get("reasons", []), "error": payload.get("error"),
            "started_at": payload.get("started_at"), "finished_at": payload.get("finished_at"),
            "report": link, "run_folder": str(run_dir)}


def post(hook: Notify, data: dict[str, Any]) -> int:
    request = urllib.request.Request(hook.webhook, data=json.dumps(data).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "drillbit"})
    with urllib.request.urlopen(request, timeout=hook.timeout_s) as response:  # noqa: S310 — the operator's URL
        return response.status


def notify_all(hooks: list[Notify], payload: dict[str, Any], run_dir: Path) -> list[dict[str, Any]]:
    """Post to every hook whose ``on`` holds the verdict; what happened to each, recorded in
    the run folder. Never raises."""
    records = []
    for hook in hooks:
        if payload.get("verdict") not in hook.send_on:
            continue
        host = urllib.parse.urlsplit(hook.webhook).netloc
        record: dict[str, Any] = {"t": time.time(), "host": host, "format": hook.format,
                                  "verdict": payload.get("verdict")}
        try:
            record["status"] = post(hook, body(hook, payload, run_dir))
            record["sent"] = 200 <= record["status"] < 300
        except urllib.error.HTTPError as exc:
            record.update(sent=False, status=exc.code, error=f"HTTP {exc.code} {exc.reason}")
        except (OSError, ValueError) as exc:
            record.update(sent=False, error=str(getattr(exc, "reason", exc)))
        records.append(record)
    if records:
        try:
            with open(run_dir / "notifications.jsonl", "a") as fh:
                for record in records:
                    fh.write(json.dumps(record) + "\n")
        except OSError:
            pass
    return records
