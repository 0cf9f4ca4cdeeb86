"""The console prints the job's own words as written, never as rich markup."""
from __future__ import annotations


def test_a_reason_quoting_the_jobs_brackets_prints_as_written():
    """gloo's errors begin '[/__w/pytorch/…/pair.cc:553]': rich read it as markup and the
    console summary raised MarkupError (drill run exited with a traceback, not the verdict)."""
    import io

    from rich.console import Console

    from drillbit.judging.report.console import summary

    buf = io.StringIO()
    reason = "the job said: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] [bold]x"
    payload = {"drill": "d[/]", "cluster": "c", "job": "j", "verdict": "fail", "reasons": [reason],
               "measurements": {}, "slos": []}
    summary(Console(file=buf, width=300), payload, "/tmp/run[/]")
    assert reason in buf.getvalue() and "/tmp/run[/]" in buf.getvalue()
