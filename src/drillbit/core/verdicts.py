"""The tri-state verdict (plus aborted) and how verdicts combine: fail > aborted >
inconclusive > pass. Below everything, so the exit codes need nothing of the checks."""
from __future__ import annotations

from typing import Literal, cast

Verdict = Literal["pass", "fail", "inconclusive", "aborted"]
RANK: dict[str, int] = {"pass": 0, "inconclusive": 1, "aborted": 2, "fail": 3}


def worst(*verdicts: str) -> Verdict:
    return cast(Verdict, max(verdicts, key=lambda v: RANK[v])) if verdicts else "pass"
