"""JUnit XML: one testcase per drill run, so CI systems show a failing drill and its reasons."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime
from typing import Any


def _seconds(payload: dict[str, Any]) -> float:
    try:
        a = datetime.fromisoformat(payload["started_at"])
        b = datetime.fromisoformat(payload["finished_at"])
        return (b - a).total_seconds()
    except (KeyError, TypeError, ValueError):
        return 0.0


def to_xml(suite: str, payloads: list[dict[str, Any]]) -> str:
    root = ET.Element("testsuites")
    failures = sum(1 for p in payloads if p["verdict"] == "fail")
    errors = sum(1 for p in payloads if p["verdict"] in ("aborted", "inconclusive") or p.get("error"))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(payloads)), failures=str(failures),
                       errors=str(errors), time=f"{sum(_seconds(p) for p in payloads):.3f}")
    for p in payloads:
        case = ET.SubElement(ts, "testcase", classname=f"{suite}.{p['cluster']}.{p['job']}", name=p["drill"],
                             time=f"{_seconds(p):.3f}")
        message = "; ".join(p.get("reasons", [])) or p["verdict"]
        if p["verdict"] == "fail":
            ET.SubElement(case, "failure", message=message, type="SLOBreach").text = "\n".join(
                f"{s['name']}: limit {s['limit']}, measured {s['measured']}, {s['status']}" for s in p.get("slos", []))
        elif p["verdict"] in ("aborted", "inconclusive") or p.get("error"):
            ET.SubElement(case, "error", message=message, type=p["verdict"]).text = p.get("error") or message
        out = ET.SubElement(case, "system-out")
        out.text = "\n".join(f"{k}={v}" for k, v in p.get("measurements", {}).items())
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
