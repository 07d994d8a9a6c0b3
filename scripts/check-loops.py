#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when files of a C directory form a loop: two or more .c files
that call each other's functions, directly or round a circle, or headers
that include each other. A reader can then learn the files one at a time,
bottom up; a loop means none of them can be understood without the others.

    scripts/check-loops.py [DIR]     (default: server/mpm/bucketed)

Prints each loop with the calls (or includes) that close it and exits 1;
exits 0 when the files form a line. Reads the sources as text: a function
is "defined" in a file when a non-static definition starts a line there,
and "called" where its name is followed by "(" (comments and strings
removed first). A function passed by pointer (a thread's main) is not a
call; that keeps a thread's creator above the thread's code, as intended.
"""
import pathlib
import re
import sys


def without_comments_and_strings(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


DEFINITION = re.compile(r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{}]*\)"
                        r"\s*(?:__attribute__\s*\(\(.*?\)\)\s*)?\{", re.M | re.S)
INCLUDE = re.compile(r'^#\s*include\s+"([^"]+)"', re.M)


def call_graph(directory):
    code = {p.name: without_comments_and_strings(p.read_text())
            for p in sorted(directory.glob("*.c"))}
    defined = {}
    for name, text in code.items():
        for match in DEFINITION.finditer(text):
            defined.setdefault(match.group(1), name)
    edges = {name: {} for name in code}
    for name, text in code.items():
        for function, home in defined.items():
            if home != name and re.search(r"\b" + function + r"\s*\(", text):
                edges[name].setdefault(home, []).append(function)
    return edges


def include_graph(directory):
    headers = {p.name for p in directory.glob("*.h")}
    edges = {}
    for path in sorted(directory.glob("*.h")):
        text = without_comments_and_strings(path.read_text())
        edges[path.name] = {h: ["#include"] for h in INCLUDE.findall(text)
                            if h in headers and h != path.name}
    return edges


def loops(edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in edges[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in edges:
        if node not in index:
            visit(node)
    return found


def main(argv):
    directory = pathlib.Path(argv[1] if len(argv) > 1
                             else "server/mpm/bucketed")
    failed = False
    for what, edges in (("calls", call_graph(directory)),
                        ("includes", include_graph(directory))):
        for component in loops(edges):
            failed = True
            print(f"loop of {what}: {' '.join(component)}")
            for a in component:
                for b in component:
                    if b in edges[a]:
                        print(f"  {a} -> {b}: {', '.join(edges[a][b][:6])}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
