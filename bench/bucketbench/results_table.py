# SPDX-License-Identifier: Apache-2.0
"""The two results tables, docs/benchmarks.md's "Today's results" and
README.md's "Results": their rows written as Markdown, read back, and
compared. Nothing here imports the rest of the harness, so
scripts/check-results.py runs without matplotlib or a build."""

import re
from dataclasses import dataclass

PAGE_BEGIN = "<!-- bench/run --publish today: generated table begins -->"
PAGE_END = "<!-- bench/run --publish today: generated table ends -->"
README_BEGIN = "<!-- bench/run --publish readme: generated table begins -->"
README_END = "<!-- bench/run --publish readme: generated table ends -->"
# The page README.md links its rows to.
PAGE_LINK = "docs/benchmarks.md"
# The families README.md shows (at most eight), in the page's order.
README_FAMILIES = ("w1-w3", "pinned", "idle", "faults", "near-limit",
                   "restart", "users", "memory")
PAGE_HEADER = ("family", "what", "headline (range over rounds)", "commit",
               "date", "section")
README_HEADER = ("what", "result", "commit", "date", "where")
LINK = re.compile(r"^\[([^\]]+)\]\(([^)]*)\)$")


class TableError(Exception):
    """A file without its markers, or a table row that is no row."""


@dataclass(frozen=True)
class Row:
    """One family's row; anchor is the section's #anchor on the page."""
    family: str
    what: str
    figure: str
    commit: str
    date: str
    title: str
    anchor: str


def _line(cells):
    return "| " + " | ".join(cells) + " |"


def _rule(header):
    return "|" + "|".join("---" for _ in header) + "|"


def page_table(rows, context):
    """The page's block: the context line (machine, kernel, versions,
    load), then one row per family."""
    lines = [context, "", _line(PAGE_HEADER), _rule(PAGE_HEADER)]
    lines += [_line([r.family, r.what, r.figure, r.commit, r.date,
                     f"[{r.title}]({r.anchor})"]) for r in rows]
    return "\n".join(lines)


def readme_table(rows):
    """README's block: the rows of README_FAMILIES, linking to the page."""
    lines = [_line(README_HEADER), _rule(README_HEADER)]
    lines += [_line([r.what, r.figure, r.commit, r.date,
                     f"[{r.title}]({PAGE_LINK}{r.anchor})"])
              for r in rows if r.family in README_FAMILIES]
    return "\n".join(lines)


def between(text, begin, end, where):
    """The text between the lines begin and end."""
    try:
        _, rest = text.split(begin, 1)
        inside, _ = rest.split(end, 1)
    except ValueError:
        raise TableError(f"{where} needs the lines {begin} and {end}") \
            from None
    return inside


def replace_between(text, begin, end, inside, where):
    """text with what lies between the lines begin and end replaced."""
    between(text, begin, end, where)
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{inside}\n{end}{tail}"


def _cells(block, header, where):
    """The cells of every row of the table in block (its header checked)."""
    lines = [line.strip() for line in block.splitlines()
             if line.strip().startswith("|")]
    if not lines or _split(lines[0]) != list(header):
        raise TableError(f"{where}: the table's header is not "
                         f"{_line(header)}")
    rows = []
    for line in lines[2:]:
        cells = _split(line)
        if len(cells) != len(header):
            raise TableError(f"{where}: {len(cells)} cells, not "
                             f"{len(header)}: {line}")
        rows.append(cells)
    return rows


def _split(line):
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def _link(cell, prefix, where):
    match = LINK.match(cell)
    if not match or not match.group(2).startswith(prefix + "#"):
        raise TableError(f"{where}: {cell!r} is no link to {prefix}#...")
    return match.group(1), match.group(2)[len(prefix):]


def page_rows(page_text, where="docs/benchmarks.md"):
    block = between(page_text, PAGE_BEGIN, PAGE_END, where)
    return [Row(family, what, figure, commit, date,
                *_link(link, "", where))
            for family, what, figure, commit, date, link
            in _cells(block, PAGE_HEADER, where)]


def readme_rows(readme_text, where="README.md"):
    """README's rows; their family is not in the table (None)."""
    block = between(readme_text, README_BEGIN, README_END, where)
    return [Row(None, what, figure, commit, date,
                *_link(link, PAGE_LINK, where))
            for what, figure, commit, date, link
            in _cells(block, README_HEADER, where)]


def differences(page_text, readme_text):
    """What differs between README's rows and the page's rows of
    README_FAMILIES, one message per row (none when they agree)."""
    expected = [r for r in page_rows(page_text)
                if r.family in README_FAMILIES]
    shown = readme_rows(readme_text)
    found = {r.what: r for r in shown}
    messages = []
    for row in expected:
        other = found.pop(row.what, None)
        if other is None:
            messages.append(f"row {row.what!r} (family {row.family}) is "
                            f"on the page but not in README.md")
            continue
        for field in ("figure", "commit", "date", "title", "anchor"):
            mine, theirs = getattr(row, field), getattr(other, field)
            if mine != theirs:
                messages.append(f"row {row.what!r}: {field} differs: page "
                                f"{mine!r}, README.md {theirs!r}")
    messages += [f"row {what!r} is in README.md but not among the page's "
                 f"rows of {', '.join(README_FAMILIES)}" for what in found]
    if not messages and [r.what for r in shown] != \
            [r.what for r in expected]:
        messages.append("README.md's rows are not in the page's order")
    return messages
