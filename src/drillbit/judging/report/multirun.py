"""The reports of runs of several drills — suite and gate, repeat, sweep, compare, campaign,
game day — from one page model: headings, paragraphs, lists, tables (each row may carry a
tone: its verdict or crash class) and inline figures. One Markdown renderer (for a CI job
summary or a PR comment) and one self-contained HTML renderer draw every kind, and
:func:`write` puts a kind's files into its run folder (``drillbit.core.runfolder``) whole.
"""
from __future__ import annotations

import html as _html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, Union

from drillbit.core.runfolder import write_files

# a row's tone -> its background in HTML (verdicts, and the crash classes of a sweep)
TONES = {"pass": "#dcfce7", "fail": "#fee2e2", "inconclusive": "#fef9c3", "aborted": "#e5e7eb",
         "silent": "#fed7aa", "hard-fail": "#fecaca", "lost-work": "#fef3c7", "not-reached": "#f3f4f6",
         "error": "#e5e7eb", "skipped": "#f3f4f6", "n/a": "#f3f4f6"}


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Table:
    head: Sequence[str]
    rows: Sequence[Sequence[Any]]
    right: frozenset[str] = frozenset()   # columns of numbers, aligned right
    tones: list[str | None] | None = None  # per row


@dataclass
class Figure:
    """An inline SVG: drawn in the HTML page; Markdown has no room for it."""

    svg: str


@dataclass
class Bullets:
    items: list[str]


Block = Union[Heading, Table, Figure, Bullets, str]


@dataclass
class Page:
    title: str
    blocks: list[Block] = field(default_factory=list)
    level: int = 2

    def markdown(self) -> str:
        out = [f"{'#' * self.level} {self.title}", ""]
        for block in self.blocks:
            text = _markdown(block)
            if text is not None:
                out += [text, ""]
        return "\n".join(out).rstrip("\n") + "\n"

    def html(self) -> str:
        body = "".join(_html_block(b) for b in self.blocks)
        return ("<!doctype html><html><head><meta charset='utf-8'>"
                f"<title>{_html.escape(self.title.replace('`', ''))}</title><style>"
                "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
                "table{border-collapse:collapse;margin:.5em 0}"
                "td,th{border:1px solid #d0d7de;padding:4px 8px;vertical-align:top;text-align:left}"
                ".num{text-align:right}code{background:#f6f8fa;padding:0 .2em}</style></head><body>"
                f"<h{self.level}>{_inline(self.title)}</h{self.level}>{body}</body></html>\n")


def _row(cells: Sequence[str]) -> str:
    return "|" + "|".join(f" {str(c).replace('|', chr(92) + '|')} " if str(c) else " " for c in cells) + "|"


def table_markdown(t: Table) -> str:
    lines = [_row(t.head), "|" + "|".join("---:" if h in t.right else "---" for h in t.head) + "|"]
    lines += [_row(row) for row in t.rows]
    return "\n".join(lines)


def _markdown(block: Block) -> str | None:
    if isinstance(block, Heading):
        return f"{'#' * block.level} {block.text}"
    if isinstance(block, Table):
        return table_markdown(block)
    if isinstance(block, Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Figure):
        return None
    return block


def _inline(text: str) -> str:
    """The little Markdown the pages use, as HTML: **bold**, `code`, <br>."""
    parts = []
    for piece in str(text).split("<br>"):
        e = _html.escape(piece)
        e = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", e)
        e = re.sub(r"`([^`]+)`", r"<code>\1</code>", e)
        parts.append(e)
    return "<br>".join(parts)


def _html_block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{_inline(block.text)}</h{block.level}>"
    if isinstance(block, Figure):
        return f"<div>{block.svg}</div>"
    if isinstance(block, Bullets):
        return "<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Table):
        head = "".join(f"<th>{_html.escape(h)}</th>" for h in block.head)
        rows = []
        for i, row in enumerate(block.rows):
            tone = block.tones[i] if block.tones and i < len(block.tones) else None
            style = f" style='background:{TONES[tone]}'" if tone in TONES else ""
            cells = "".join(f"<td{' class=num' if h in block.right else ''}{style}>{_inline(c)}</td>"
                            for h, c in zip(block.head, row, strict=False))
            rows.append(f"<tr>{cells}</tr>")
        return f"<table><tr>{head}</tr>{''.join(rows)}</table>"
    return f"<p>{_inline(block)}</p>"


def write(folder: Path, page: Page, *, md: str, html: str | None = None, data: Any = None,
          json_name: str | None = None, extra: dict[str, str] | None = None) -> Path:
    """A kind's files in its run folder: the page as Markdown (and HTML), its data as JSON,
    and anything else it writes (junit.xml)."""
    files = {md: page.markdown()}
    if html is not None:
        files[html] = page.html()
    if json_name is not None:
        files[json_name] = json.dumps(data, indent=2, default=str) + "\n"
    files.update(extra or {})
    return write_files(folder, files)
