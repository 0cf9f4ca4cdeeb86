"""The documentation: every example it shows is loaded or parsed here, the README stays a
front page, its links resolve, and the generated reference describes every field."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import textwrap

import click
import pytest
import yaml
from markdown_it import MarkdownIt
from pydantic import TypeAdapter

from drillbit.entry import docgen
from drillbit.entry.cli import cli
from drillbit.spec.config import JobProfile
from drillbit.spec.load import load_suite
from drillbit.faults.loading import load_config, load_drill
from drillbit.spec.signals import Signal

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
DRILL = re.compile(r"(?:^|&&\s*|\s)((?:\S*/)?drill\s.*)$", re.M)


def parsed(page: Path) -> list:
    """The page as a CommonMark parser reads it (the rules GitHub and PyPI render with)."""
    return MarkdownIt("commonmark").enable("table").parse(page.read_text())


def blocks(lang: str) -> list[tuple[str, str]]:
    """Every fenced block of ``lang``, paired as CommonMark pairs fences (not by a regex)."""
    found = []
    for page in PAGES + [ROOT / "README.md"]:
        for t in parsed(page):
            if t.type == "fence" and t.info.strip() == lang:
                found.append((f"{page.relative_to(ROOT)}:{t.map[0] + 1}", t.content))
    return found


def yaml_kind(body: str) -> str:
    first = body.lstrip("\n").splitlines()[0]
    if first.startswith(" "):  # a fragment: items of a signals list, or a field of a profile (tiers, control_plane)
        key = first.strip().split(":")[0]
        return key if key in JobProfile.model_fields else "signals"
    if first.startswith("# .github/"):
        return "workflow"
    if first.startswith("# campaigns/") or re.search(r"^arrival:", body, re.M):
        return "campaign"
    if first.startswith("# drills/suites/") or re.search(r"^drills:", body, re.M):
        return "suite"
    if re.search(r"^fault:", body, re.M):
        return "drill"
    return "config"


@pytest.mark.parametrize("where,body", blocks("yaml"), ids=[w for w, _ in blocks("yaml")])
def test_every_yaml_example_loads(where, body, tmp_path):
    kind = yaml_kind(body)
    path = tmp_path / "example.yaml"
    path.write_text(body)
    if kind == "workflow":
        steps = yaml.safe_load(body)["jobs"]
        commands = [s["run"] for job in steps.values() for s in job["steps"] if "run" in s]
        shown = [m.group(1) for c in commands for m in [DRILL.search(c)] if m]
        assert shown, where
        for line in shown:
            parse_drill_command(line, where)
        return
    if kind == "signals" or kind in JobProfile.model_fields:
        data = yaml.safe_load(textwrap.dedent(body))
        if kind == "signals":
            TypeAdapter(list[Signal]).validate_python(data)
        else:
            TypeAdapter(JobProfile.model_fields[kind].annotation).validate_python(data[kind])
        return
    config = load_config(None)
    if kind == "config":
        load_config(path)
    elif kind == "drill":
        load_drill(path, config)
    elif kind == "suite":
        load_suite(str(path), config)
    else:
        from drillbit.runs.campaign import load_campaign

        load_campaign(path, config)


def parse_drill_command(line: str, where: str) -> None:
    """Parse a `drill …` command line as the CLI would, without running it: an unknown
    command, option or choice fails here."""
    args = shlex.split(line, comments=True)
    for i, token in enumerate(args):  # the shell's redirections and pipes are not the command's
        if token[:1] in (">", "|", ";") or re.match(r"^\d>", token):
            args = args[:i]
            break
    while args and "=" in args[0]:  # VAR=value drill ...
        args.pop(0)
    if args and args[0].endswith("/drill"):
        args[0] = "drill"
    if args[:3] == ["python", "-m", "drillbit.core.netns"]:
        args = args[3:]
    assert args and args[0] == "drill", f"{where}: {line}"
    ctx = cli.make_context("drill", args[1:], resilient_parsing=False)
    command: click.Command = cli
    rest = args[1:]
    while isinstance(command, click.Group) and rest:
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None, f"{where}: no command {name!r} in {line!r}"
        ctx = sub.make_context(name, list(rest), parent=ctx)
        command, rest = sub, [*getattr(ctx, "_protected_args", []), *ctx.args] if isinstance(sub, click.Group) else []


def drill_lines() -> list[tuple[str, str]]:
    found = []
    for where, body in blocks("sh") + blocks("cron") + blocks("ini"):
        for line in body.splitlines():
            text = line.split("ExecStart=", 1)[-1].strip()
            text = re.sub(r"^(\S+\s+){5}(?=\S*drill )", "", text) if where and re.match(r"^[\d*]", text) else text
            m = DRILL.search(text)
            if m and "pip install" not in text.split(m.group(1))[0][-20:]:
                found.append((where, m.group(1)))
    return found


@pytest.mark.parametrize("where,line", drill_lines(), ids=[f"{w}:{line[:40]}" for w, line in drill_lines()])
def test_every_drill_command_shown_parses(where, line, monkeypatch):
    monkeypatch.chdir(ROOT)
    parse_drill_command(line, where)


def test_the_readme_is_a_front_page_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert not missing


def test_the_generated_reference_describes_every_field():
    from drillbit.runs.campaign import CampaignSpec
    from drillbit.spec.config import DrillConfig
    from drillbit.spec.models import DrillSpec, SuiteSpec

    for model in (DrillConfig, DrillSpec, SuiteSpec, CampaignSpec):
        bare = [key for key, _, _, meaning in docgen.model_rows(model) if not meaning]
        assert not bare, f"{model.__name__}: no description for {bare}"
    text = docgen.config_reference()
    for key in ("clusters.NAME.engine", "jobs.NAME.launch.command", "fault.trigger.at_step", "slo.detect_within",
                "drills[].known_defects", "arrival.mtbi"):
        assert f"`{key}`" in text, key
    assert "| `steady.timeout` | duration |" in text


def test_the_generated_catalogue_has_every_fault_and_its_params():
    from drillbit.faults import registry

    text = docgen.fault_catalogue()
    for name in ("kill-rank", "hang-collective", "corrupt-checkpoint", "kill-during-save", "node-down"):
        assert f"#### `{name}`" in text
    assert "`flip_bytes`" in text or "`mode`" in text
    assert len(re.findall(r"^#### ", text, re.M)) == len({e for e in registry()} & {
        m for m in re.findall(r"fault plugin\*\*: `([a-z-]+)`", text)})


def test_a_page_asking_for_an_unknown_generated_part_is_an_error():
    with pytest.raises(KeyError, match="no generated part named 'nope'"):
        docgen.fill("x\n<!-- generated: nope -->\ny")
    assert "| `default_cluster` |" in docgen.fill("<!-- generated: config -->")


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "site" / "config" / "index.html").read_text()
    assert "clusters.NAME.engine" in page and "&lt;reports_dir&gt;" in page


def test_a_wrong_command_or_option_in_an_example_is_caught(monkeypatch):
    monkeypatch.chdir(ROOT)
    for line in ("drill runn kill-rank", "drill run kill-rank --no-such-flag", "drill gameday start game-day",
                 "drill gate --suite pre-deploy --junit"):
        with pytest.raises((click.UsageError, AssertionError)):
            parse_drill_command(line, "here")
    parse_drill_command("drill gate --suite pre-deploy --cluster staging --junit junit.xml", "here")


def test_every_python_example_compiles_and_the_job_calls_write_what_the_preset_reads(tmp_path, monkeypatch):
    shown = blocks("python")
    assert shown
    for where, body in shown:
        compile(body, where, "exec")
    where, body = next((w, b) for w, b in shown if "from drillbit import job" in b)
    events = tmp_path / "events.log"
    monkeypatch.setenv("DRILLBIT_EVENTS", str(events))
    exec(compile(body, where, "exec"), {"n": 7, "step": 5, "path": str(tmp_path / "ckpt" / "step_5")})
    from drillbit.judging.probes.preset import matcher, signals_of

    reads = matcher(signals_of(["drillbit"]))
    kinds = [kind for line in events.read_text().splitlines() for kind, _, _ in reads.match(line)]
    assert kinds[:1] == ["step"] and "ckpt.save" in kinds and "restore" in kinds, kinds


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_page_renders_as_written(page):
    """#45: the README's fences paired wrongly — an empty block at line 45 swallowed the text
    to line 53, and the next ran to line 181 — so a CommonMark parser rendered three of its
    headings. No fenced block may be empty, or hold a heading or a table a page meant to
    render; every heading written outside a block must come out as a heading."""
    text = page.read_text()
    tokens = parsed(page)
    for t in tokens:
        if t.type != "fence":
            continue
        where = f"{page.relative_to(ROOT)}:{t.map[0] + 1}"
        assert t.content.strip(), f"{where}: an empty fenced block (a fence left open?)"
        if not t.info.strip():  # output meant to show raw is marked text
            swallowed = [line for line in t.content.splitlines() if re.match(r"^#{1,4} \w|^\|---", line)]
            assert not swallowed, f"{where}: a fenced block holds page text: {swallowed[:2]}"
    rendered = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    outside = []
    in_fence = False
    for line in text.splitlines():
        if re.match(r"^ {0,3}(```|~~~)", line):
            in_fence = not in_fence
        elif not in_fence and (m := re.match(r"^#{1,6} (.+?)\s*#*$", line)):
            outside.append(m.group(1))
    missing = [h for h in outside if h not in rendered]
    assert not missing, f"{page.relative_to(ROOT)}: headings that do not render: {missing[:3]}"


def test_nothing_cites_a_file_users_do_not_have():
    """#45: the catalogue cited the facts file under shared/ 53 times; users have no shared/. Cite the
    public source itself (the paper and its section, the logbook file, the issue)."""
    cited = [f"{p.relative_to(ROOT)}:{i}" for folder in ("src", "faults", "drills", "docs", "campaigns", "runbooks")
             for p in sorted((ROOT / folder).rglob("*")) if p.suffix in (".py", ".yaml", ".md", ".j2")
             for i, line in enumerate(p.read_text().splitlines(), 1) if "FACTS" in line]
    cited += [f"README.md:{i}" for i, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1)
              if "FACTS" in line]
    assert not cited, cited


def test_the_readme_renders_its_headings_and_links_to_every_page_of_the_path():
    """#45: parsed as GitHub and PyPI parse it, the README shows its sections (at least 12
    headings) and leads to each page of the learning path."""
    tokens = parsed(ROOT / "README.md")
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert len(headings) >= 12, headings
    text = (ROOT / "README.md").read_text()
    for page in ("getting-started", "own-job", "gating", "gameday", "prometheus", "cli", "troubleshooting",
                 "privileges", "platforms", "attach", "kubernetes", "changelog"):
        assert f"docs/{page}.md" in text, page


def test_the_generated_parts_are_current():
    """The reference pages are committed with their generated parts, so that they read the
    same on the repository's web view as on the site; a change to the code that changes one
    of them must come with the page (python -m drillbit.entry.docgen --write)."""
    stale = [str(p.relative_to(ROOT)) for p in docgen.pages(ROOT) if docgen.fill(p.read_text()) != p.read_text()]
    assert not stale, f"stale generated parts in {stale}: run python -m drillbit.entry.docgen --write"
    assert {p.name for p in docgen.pages(ROOT)} >= {"config.md", "catalogue.md", "reports.md", "architecture.md",
                                                     "cli.md", "privileges.md"}


def test_fill_replaces_between_the_marks_and_adds_a_missing_end_mark():
    once = docgen.fill("a\n<!-- generated: builtins -->\nb\n")
    assert once.count("<!-- end generated: builtins -->") == 1 and once.endswith("\nb\n")
    assert docgen.fill(once) == once  # idempotent
    edited = once.replace("Built-in clusters", "Hand-edited clusters")
    assert docgen.fill(edited) == once  # what is between the marks is the code's


def test_the_learning_path_pages_each_end_with_their_next_step():
    path = ["getting-started", "own-job", "gating", "gameday", "prometheus"]
    for page, following in zip(path, path[1:], strict=False):
        text = (ROOT / "docs" / f"{page}.md").read_text()
        assert "\n## Next\n" in text, page
        assert f"({following}.md" in text.split("\n## Next\n", 1)[1], (page, following)


def test_every_fault_declares_what_it_needs_and_what_it_touches():
    from drillbit.faults import registry

    bare = [name for name, cls in registry().items() if not cls.needs or not cls.blast_radius]
    assert not bare
    assert all(f"`{name}`" in docgen.privileges() for name in registry())
