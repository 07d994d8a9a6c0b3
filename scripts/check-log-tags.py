#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when a log line of the MPM has no stable tag, when two log calls
share one, or when docs/log-messages.md and the code disagree (a tag not
listed, a listed tag no call has, or a call whose levels, the APLOG_ names
of its level argument, are not the levels the list's Level column names),
or when a call has a tag the list names as retired (its line "Retired,
never to be reused: ..."): a tag is never given to another message.
A tag is BKLOGNO(nnnnn) right before
the format string of an ap_log_error/perror/cerror/rerror call, as httpd's
own APLOGNO; an operator greps the log for it and looks it up.

    scripts/check-log-tags.py [SOURCE_DIR [DOC]]
        (default: server/mpm/bucketed docs/log-messages.md)

Prints each problem and exits 1; exits 0 when every call has its own tag
and the list matches. Reads the sources as text, comments removed.
"""
import pathlib
import re
import sys

CALL = re.compile(r"\bap_log_(?:error|perror|cerror|rerror)\s*\(")
# The tag, then the format: a literal, or a macro of one and a literal.
TAGGED = re.compile(r'\s*BKLOGNO\((\d{5})\)\s*(?:[A-Z][A-Z0-9_]*\s*)?"')
# A row of the list: the tag, then its Level column.
LISTED = re.compile(r"^\|\s*`?BK(\d{5})`?\s*\|([^|\n]*)", re.M)
# The list's line of tags whose messages are no longer written.
RETIRED = re.compile(r"^Retired, never to be reused:(.*)$", re.M)
# httpd's levels, as LogLevel spells them; APLOG_<upper case> in the code.
LEVELS = ("emerg", "alert", "crit", "err", "warning", "notice", "info",
          "debug") + tuple(f"trace{n}" for n in range(1, 9))
CODE_LEVEL = re.compile(r"\bAPLOG_(" + "|".join(LEVELS).upper() + r")\b")
DOC_LEVEL = re.compile(r"\b(" + "|".join(LEVELS) + r")\b")


def without_comments(text):
    """The text with its comments blanked, line numbers kept."""
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"),
                  text, flags=re.S)


def level_argument(args):
    """The second argument (after APLOG_MARK) of a call's argument text."""
    depth, start, index = 0, 0, 0
    for i, ch in enumerate(args):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            if index == 1:
                return args[start:i]
            index, start = index + 1, i + 1
    return ""


def tags_in_code(directory):
    """[(tag or None, levels, file, line)] for every log call; levels is
    the set of level names its level argument can give."""
    found = []
    for path in sorted(directory.glob("*.c")):
        text = without_comments(path.read_text())
        for call in CALL.finditer(text):
            line = text.count("\n", 0, call.start()) + 1
            quote = text.find('"', call.end())
            # The arguments before the format string hold no string, so
            # the tag, if any, ends at the first quote.
            head = text[call.end():quote + 1]
            last_comma = head.rfind(",")
            tagged = TAGGED.fullmatch(head[last_comma + 1:])
            levels = {m.lower() for m in
                      CODE_LEVEL.findall(level_argument(head))}
            found.append((tagged.group(1) if tagged else None, levels,
                          path.name, line))
    return found


def words(levels):
    return " or ".join(sorted(levels, key=LEVELS.index)) or "no APLOG_ level"


def problems(directory, doc):
    found = tags_in_code(directory)
    text = doc.read_text() if doc.exists() else ""
    rows = LISTED.findall(text)
    retired = {tag for line in RETIRED.findall(text)
               for tag in re.findall(r"BK(\d{5})", line)}
    listed = [tag for tag, _ in rows]
    doc_levels = {tag: set(DOC_LEVEL.findall(level)) for tag, level in rows}
    out = []
    seen = {}
    for tag, levels, name, line in found:
        if tag is None:
            out.append(f"{name}:{line}: log call without BKLOGNO(nnnnn)")
            continue
        if tag in seen:
            out.append(f"{name}:{line}: BK{tag} already used at {seen[tag]}")
        seen.setdefault(tag, f"{name}:{line}")
        if tag in retired:
            out.append(f"{name}:{line}: BK{tag} is retired in {doc}: "
                       "give the message a new tag")
        elif tag not in listed:
            out.append(f"{name}:{line}: BK{tag} is not in {doc}")
        elif levels != doc_levels[tag]:
            out.append(f"{name}:{line}: BK{tag} is logged at "
                       f"{words(levels)}, {doc} lists "
                       f"{words(doc_levels[tag])}")
    for tag in listed:
        if tag not in seen:
            out.append(f"{doc}: BK{tag} is listed but no log call has it")
    if len(set(listed)) != len(listed):
        out.append(f"{doc}: a tag is listed twice")
    return out


def main(argv):
    directory = pathlib.Path(argv[1] if len(argv) > 1
                             else "server/mpm/bucketed")
    doc = pathlib.Path(argv[2] if len(argv) > 2 else "docs/log-messages.md")
    found = problems(directory, doc)
    for p in found:
        print(p)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
