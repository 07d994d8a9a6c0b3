#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when a relative link of README.md or docs/*.md leads nowhere: the
file (or image) it names does not exist, or its #anchor is no heading of
the page it names. Anchors are GitHub's: the heading's text in lower case,
everything but letters, digits, '_', '-' and spaces dropped, spaces made
'-', and -1, -2, ... added to repeats.

    scripts/check-doc-links.py [TOP]    (default: this script's checkout)

Prints each broken link as FILE:LINE: target (why) and exits 1; exits 0
when every link resolves. Links to other sites (scheme:...) are not
followed; links inside code (`...`, fenced blocks) are not links.
"""
import pathlib
import re
import sys

# [text](target) and ![alt](target); the target ends at a space (a title
# may follow) or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, code spans blanked."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)),
                                        line)


def slug(heading):
    """GitHub's anchor for a heading's text (before repeats are numbered)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor the page's headings make."""
    seen = {}
    found = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(top):
    """[(file, line, target, why)] for every link that leads nowhere."""
    pages = [top / "README.md", *sorted((top / "docs").glob("*.md"))]
    cache = {}
    broken = []
    for page in pages:
        for number, line in prose_lines(page.read_text()):
            for match in LINK.finditer(line):
                target = match.group(1)
                if SCHEME.match(target):
                    continue
                name, _, anchor = target.partition("#")
                path = (page.parent / name).resolve() if name else page
                why = None
                if not path.exists():
                    why = "no such file"
                elif anchor and path.suffix == ".md":
                    if path not in cache:
                        cache[path] = anchors(path)
                    if anchor not in cache[path]:
                        why = "no such heading"
                if why:
                    broken.append((page.relative_to(top), number, target,
                                   why))
    return broken


def main(argv):
    top = pathlib.Path(argv[1] if len(argv) > 1
                       else pathlib.Path(__file__).resolve().parent.parent)
    broken = broken_links(top)
    for page, number, target, why in broken:
        print(f"{page}:{number}: {target} ({why})")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
