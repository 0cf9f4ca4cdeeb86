"""A known defect's verdict quotes the job's own error line where the signature matched (#59:
torch's "PytorchStreamReader failed reading zip archive" comes before a long generic tail,
which the quote used to keep instead), and a path at a line's end as before."""
from __future__ import annotations

import re

from drillbit.judging.checks.defect import excerpt

TORN = ("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory. This is an "
        "internal miniz error. If you are seeing this error, there is a high likelihood that your checkpoint file is "
        "corrupted. This can happen if the checkpoint was not saved properly, was transferred incorrectly, or was "
        "modified.")


def test_the_words_the_signature_matched_are_quoted():
    found = re.search(r"PytorchStreamReader failed reading zip archive", TORN)
    said = excerpt(TORN, span=found.span())
    assert said.startswith("RuntimeError: PytorchStreamReader failed reading zip archive") and len(said) <= 200, said
    assert "miniz" not in excerpt(TORN, span=re.search("central directory", TORN).span())[-40:]


def test_a_match_at_the_end_keeps_the_lines_end():
    path = "FileNotFoundError: [Errno 2] No such file or directory: '" + "/very/long" * 30 + "/trainer_state.json'"
    said = excerpt(path, span=re.search(r"trainer_state\.json", path).span())
    assert said.startswith("FileNotFoundError: …") and said.endswith("trainer_state.json'"), said
    assert excerpt("short line", span=(0, 5)) == "short line"
