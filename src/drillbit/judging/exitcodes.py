"""Exit codes: the contract CI systems and people act on (DESIGN.md).

    0 pass   1 a recovery SLO failed (and nothing else)   2 usage or config error
    3 inconclusive   4 aborted   5 harness error

One function decides a drill's code from its verdict and its error, and one decides a
suite's; ``drill run``, ``drill suite run``, ``drill gate`` and ``drill gameday run`` all
use them. An error wins over a verdict — a drill whose harness broke cannot prove a
recovery failure: config (2) before harness (5) before the worst verdict. A job that never
let the drill begin (it exited, or never stepped, before steady state) is no harness bug:
that drill is inconclusive (3).
"""
from __future__ import annotations

from typing import Iterable

from drillbit.core.verdicts import worst

PASS, FAIL, USAGE, INCONCLUSIVE, ABORTED, HARNESS = 0, 1, 2, 3, 4, 5
BY_VERDICT = {"pass": PASS, "fail": FAIL, "inconclusive": INCONCLUSIVE, "aborted": ABORTED}


def exit_code(verdict: str, error_kind: str | None = None) -> int:
    if error_kind in ("config", "busy"):  # busy: another drill holds the cluster; nothing was run
        return USAGE
    if error_kind == "inconclusive":  # the job never let the drill begin: nothing established
        return BY_VERDICT[worst(verdict, "inconclusive")]
    if error_kind is not None:
        return HARNESS
    return BY_VERDICT[verdict]


def suite_exit_code(results: Iterable[tuple[str, str | None]]) -> int:
    """(verdict, error kind) of each drill run -> the suite's code."""

    results = list(results)
    kinds = {k for _, k in results}
    if kinds & {"config", "busy"}:
        return USAGE
    if kinds - {None, "inconclusive"}:
        return HARNESS
    verdicts = [worst(v, "inconclusive") if k == "inconclusive" else v for v, k in results]
    return BY_VERDICT[worst(*verdicts)] if results else INCONCLUSIVE
