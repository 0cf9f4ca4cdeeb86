"""`drill list --known-defects` (#59): the gallery as the command line shows it. Every drill
of drills/known-defects/ is listed with its defect, how it was reproduced, the evidence that
names it (a signature, a failed check or a mark) and the fixed profile drilled beside it; each
affected and fixed profile is one drillbit knows; every entry's url is its id's thread."""
from __future__ import annotations

import json
import re

from drillbit.entry import docgen
from drillbit.spec.config import DrillConfig, with_builtins
from drillbit.spec.load import catalogue
from drillbit.faults.loading import load_drill

GALLERY_AT_LEAST = 20  # published defects (issue 59)


def _rows() -> list[dict]:
    code, stdout, _ = docgen.answer("drill list --known-defects --json")
    assert code == 0, stdout
    out = json.loads(stdout)
    assert out["problems"] == []
    return out["defects"]


def test_every_defect_drill_is_listed_with_its_evidence_and_its_fix():
    rows = _rows()
    drills = {name for name, path in catalogue().items() if load_drill(path).defect is not None}
    assert {r["drill"] for r in rows} == drills
    jobs = with_builtins(DrillConfig()).jobs
    for r in rows:
        assert r["evidence"] != "—", r  # a FAIL must be named from the job's own evidence
        assert r["affected"] in jobs, r
        assert r["fixed"] in jobs or r["fixed"] == "no fix published", r
        number = r["defect"].rsplit("#", 1)[1]
        assert re.search(rf"/(issues|pull)/{number}\b", r["url"]), r
        assert r["reproduced"] in ("at-version", "same-mechanism") and r["mechanism"], r


def test_the_gallery_holds_twenty_published_defects_and_says_so():
    rows = _rows()
    assert len({r["defect"] for r in rows}) >= GALLERY_AT_LEAST, sorted({r["defect"] for r in rows})
    code, stdout, _ = docgen.answer("drill list --known-defects")
    assert code == 0 and "published defects in" in stdout and "reproduced at the stack's own version" in stdout
