#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when C code built against httpd uses a name httpd 2.4.52 lacks
(scripts/httpd-api-since.txt) outside a guard, so that every httpd from
2.4.52 on still builds it.

    scripts/check-httpd-api.py [--list FILE] [DIR...]
        (default: server/mpm/bucketed modules/bucketed_status test/modules,
         scripts/httpd-api-since.txt)

A use is guarded when an enclosing #if/#ifdef/#ifndef branch holds only on
an httpd that has the name:
  - #ifdef X, #if defined(X): X is the name, or a listed name no older;
  - #if AP_MODULE_MAGIC_AT_LEAST(20120211, N): N is at least the name's
    MMN minor (names with none need a macro test);
  - the #else of #ifndef X / #if !... of the above.
Terms joined with && all hold; a condition with || guards nothing.
A #define of a listed name is the code's own fallback for an httpd without
it (httpd_compat.h): it must sit in a branch that holds only on an httpd
lacking the name, and makes the name usable in the files that include that
header (directly or through other headers scanned). Comments and string
literals are not code. Prints each problem and exits 1, else exits 0.
"""
import pathlib
import re
import sys

TOP = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_DIRS = [TOP / d for d in ("server/mpm/bucketed",
                                  "modules/bucketed_status", "test/modules")]
DEFAULT_LIST = TOP / "scripts" / "httpd-api-since.txt"
MMN_MAJOR = 20120211

IDENT = re.compile(r"[A-Za-z_]\w*")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")
DEFINED = re.compile(r"(!\s*)?\bdefined\s*\(?\s*([A-Za-z_]\w*)\s*\)?")
MMN_TEST = re.compile(r"(!\s*)?\bAP_MODULE_MAGIC_AT_LEAST\s*\(\s*(\d+)\s*,"
                      r"\s*(\d+)\s*\)")


def version(text):
    return tuple(int(part) for part in text.split("."))


def read_list(path):
    """{name: (oldest, newest, mmn or None)}, versions as tuples."""
    names = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].split()
        if not line:
            continue
        name, since, mmn = line
        low, _, high = since.partition("-")
        names[name] = (version(low), version(high or low),
                       None if mmn == "-" else int(mmn))
    return names


def blank_comments_and_strings(text):
    """The text with comments and string/char literals blanked, line
    numbers kept."""
    def keep_lines(match):
        return re.sub(r"[^\n]", " ", match.group(0))
    return re.sub(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\""
                  r"|'(?:\\.|[^'\\\n])*'", keep_lines, text, flags=re.S)


def terms(condition):
    """[(negated, kind, value)] of the tests an #if condition joins with &&
    (none when it has ||), and whether it is one such test and nothing
    else (then its #else holds the opposite). kind: 'macro' (value: its
    name) or 'mmn' (value: the minor)."""
    if "||" in condition:
        return [], False
    found = [(bool(m.group(1)), "macro", m.group(2))
             for m in DEFINED.finditer(condition)]
    found += [(bool(m.group(1)), "mmn", int(m.group(3)))
              for m in MMN_TEST.finditer(condition)
              if int(m.group(2)) == MMN_MAJOR]
    rest = MMN_TEST.sub("", DEFINED.sub("", condition))
    return found, len(found) == 1 and re.fullmatch(r"[\s()]*", rest) is not None


class Branch:
    """What holds in one branch of a conditional: `has` (tests true: httpd
    is at least this new) and `lacks` (tests false)."""

    def __init__(self, tests, negate):
        self.has, self.lacks = [], []
        for negated, kind, value in tests:
            (self.lacks if negated != negate else self.has).append(
                (kind, value))


def has_covers(test, name, names):
    kind, value = test
    _, newest, mmn = names[name]
    if kind == "mmn":
        return mmn is not None and mmn <= value
    return value == name or (value in names and names[value][0] >= newest)


def lacks_covers(test, name, names):
    kind, value = test
    oldest, _, mmn = names[name]
    if kind == "mmn":
        return mmn is not None and mmn >= value
    return value == name or (value in names and oldest >= names[value][1])


def scan(path, names):
    """([(line, name, [Branch])] uses, [(line, name, ok)] fallback
    definitions, [problems]) of one file."""
    uses, defines, problems = [], [], []
    stack = []   # per open conditional: [(tests, only), Branch]
    text = blank_comments_and_strings(path.read_text())
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        line = lines[number]
        start = number + 1
        while line.endswith("\\") and number + 1 < len(lines):
            number += 1
            line = line[:-1] + " " + lines[number]
        number += 1
        branches = [b for _, b in stack]
        directive = DIRECTIVE.match(line)
        if directive:
            word, rest = directive.groups()
            if word in ("if", "ifdef", "ifndef", "elif"):
                if word in ("if", "elif"):
                    condition = terms(rest)
                else:
                    condition = ([(word == "ifndef", "macro", m.group(0))
                                  for m in IDENT.finditer(rest)][:1], True)
                # After an #elif, its #else knows only what that #elif
                # says (less than it could: enough).
                if word == "elif" and stack:
                    stack.pop()
                stack.append([condition, Branch(condition[0], False)])
            elif word == "else" and stack:
                tests, only = stack[-1][0]
                stack[-1][1] = Branch(tests if only else [], True)
            elif word == "endif" and stack:
                stack.pop()
            elif word == "define":
                defined = IDENT.match(rest)
                if defined and defined.group(0) in names:
                    name = defined.group(0)
                    ok = any(lacks_covers(t, name, names)
                             for b in branches for t in b.lacks)
                    defines.append((start, name, ok))
                body = rest[defined.end():] if defined else rest
                uses += [(start, m.group(0), branches)
                         for m in IDENT.finditer(body)
                         if m.group(0) in names]
            continue
        for ident in IDENT.finditer(line):
            if ident.group(0) in names:
                uses.append((start, ident.group(0), branches))
    if stack:
        problems.append(f"{path}: an #if without its #endif")
    return uses, defines, problems


def reachable(path, includes):
    """The file names path includes, directly or through scanned headers."""
    seen, todo = set(), [path.name]
    while todo:
        for name in includes.get(todo.pop(), ()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen | {path.name}


def problems(dirs, names):
    sources = sorted(p for d in dirs for p in pathlib.Path(d).rglob("*")
                     if p.suffix in (".c", ".h"))
    scanned = {p: scan(p, names) for p in sources}
    includes = {p.name: {pathlib.Path(i).name
                         for i in INCLUDE.findall(p.read_text())}
                for p in sources}
    provided = {}   # name: the files that give a fallback for it
    out = []
    for path, (_, defines, trouble) in scanned.items():
        out += trouble
        for line, name, ok in defines:
            if ok:
                provided.setdefault(name, set()).add(path.name)
            else:
                out.append(f"{path}:{line}: defines {name} (httpd "
                           f"{'.'.join(map(str, names[name][0]))}) where "
                           "httpd may have it: put it under a test that "
                           "only an older httpd passes")
    for path, (uses, _, _) in scanned.items():
        seen = reachable(path, includes)
        for line, name, branches in uses:
            guarded = any(has_covers(t, name, names)
                          for b in branches for t in b.has)
            if not guarded and not provided.get(name, set()) & seen:
                oldest, newest, mmn = names[name]
                since = ".".join(map(str, newest))
                out.append(f"{path}:{line}: {name} is httpd {since}"
                           + (f" (MMN {MMN_MAJOR}.{mmn})" if mmn else "")
                           + ", newer than 2.4.52: guard it (#ifdef, "
                           "AP_MODULE_MAGIC_AT_LEAST) or give older httpd "
                           "a fallback (httpd_compat.h)")
    return out


def main(argv):
    args = argv[1:]
    listing = DEFAULT_LIST
    if args[:1] == ["--list"]:
        listing, args = pathlib.Path(args[1]), args[2:]
    found = problems(args or DEFAULT_DIRS, read_list(listing))
    for p in found:
        print(p)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
