#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when the files of a C directory do not form a line: when two or
more files depend on each other, directly or round a circle, when a
dependency points from a lower layer up, or when headers include each
other. A reader can then learn the files one at a time, bottom up; a
circle means none of them can be understood without the others.

    scripts/check-loops.py [DIR]               check (default DIR:
                                               server/mpm/bucketed)
    scripts/check-loops.py --layers [DIR]      also print the layer order,
                                               bottom up, and every
                                               dependency pointing up
    scripts/check-loops.py --follow FUNC [DIR] follow one function through
                                               its calls: the files visited
                                               and the turns back

What a dependency is. The nodes are the .c files; a header belongs to the
.c file of the same name (event_keeper.h to event_keeper.c), and a header
without one is a node of its own (a family header of types). File A
depends on file B when A calls a function B defines, or when A takes from
one of B's headers what a header gives: a type (typedef, struct, union or
enum tag), an enum constant, a macro or a static inline function. Naming
an incomplete struct that the file declares itself (`struct x;`) takes
nothing. Reads the sources as text (comments and strings removed): a
function is "defined" where a definition starts a line, "called" where its
name is followed by "(". A function passed by pointer (a thread's main, a
hook) is not a call; that keeps a thread's creator above the thread's
code, as intended.

Layers. LAYERS names the layers bottom up by what their files hold; a
file's name says its layer. Within a layer the files are in dependency
order. A dependency points up when it goes to a higher layer, or, inside
a circle, against the order with the fewest such dependencies. A header
that belongs to a .c file declares that file's functions only, so that
a caller finds what it calls where it is defined.

Turn backs (--follow). Starting in FUNC's file, every call to a function
of this directory (static ones included, and a header's inline ones) is
followed, in the order the calls are written, the first time that
function is met; entering it and coming back from it are each a move to
another file when the two files differ. Each arrival in a file is a
visit; a visit to a file visited before is a turn back (so turn backs =
visits - files).

Exits 1 when a check fails, 0 otherwise.
"""
import itertools
import pathlib
import re
import sys

# Bottom up: (layer, what its files hold, file name patterns).
LAYERS = [
    ("policy", "pure decisions: no system calls, no httpd state",
     ["policy_*"]),
    ("shared", "the log tags, the configuration, the bucket records and"
     " the retained data, the status module's interface, the defaults,"
     " the names older httpd gives what it has",
     ["bucket.*", "bucketed*", "mpm_default.h", "httpd_compat.h"]),
    ("sys", "what the kernel can do: probes, trials, eBPF, the service"
     " manager", ["sys_*"]),
    ("listen", "each bucket's sockets and their steering", ["listen_*"]),
    ("stats", "numbers shared with the children and mod_bucketed_status",
     ["stats*"]),
    ("child", "what both child models share", ["child_*"]),
    ("model", "the child models", ["prefork_*", "event_*"]),
    ("parent", "the parent", ["parent*"]),
    ("hooks", "directives and the module's hooks",
     ["directives*", "mod_*"]),
]


def without_comments_and_strings(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


DEFINITION = re.compile(r"^(static\s+)?(?:inline\s+)?[A-Za-z_][\w \t\*]*?"
                        r"\b(\w+)\s*\([^;{}]*\)"
                        r"\s*(?:__attribute__\s*\(\(.*?\)\)\s*)?\{",
                        re.M | re.S)
DECLARATION = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{}()]*"
                         r"(?:\([^;{}]*\)[^;{}()]*)*\)\s*;", re.M)
INCLUDE = re.compile(r'^#\s*include\s+"([^"]+)"', re.M)
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do"}


def body_end(text, brace):
    """The index just past the block whose "{" is at brace."""
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def functions(text):
    """(name, static, body) of each function defined in text."""
    found = []
    for m in DEFINITION.finditer(text):
        if m.group(2) in KEYWORDS:
            continue
        found.append((m.group(2), bool(m.group(1)),
                      text[m.end() - 1:body_end(text, m.end() - 1)]))
    return found


def inline_bodies(text):
    return "\n".join(body for _, _, body in functions(text))


def header_names(text):
    """What a header gives: its types, tags, enum constants, macros and
    inline functions (the include guard aside)."""
    names, typedefs = set(), set()
    guard = re.search(r"^#\s*ifndef\s+(\w+)\s*\n#\s*define\s+\1\b", text,
                      re.M)
    for m in re.finditer(r"^#\s*define\s+(\w+)", text, re.M):
        if not guard or m.group(1) != guard.group(1):
            names.add(m.group(1))
    for m in re.finditer(r"\b(struct|union|enum)\s+(\w+)\s*\{", text):
        names.add(m.group(1) + " " + m.group(2))
    for m in re.finditer(r"\benum\b[^{;]*\{([^}]*)\}", text):
        for item in m.group(1).split(","):
            ident = re.match(r"\s*([A-Za-z_]\w*)", item)
            if ident:
                names.add(ident.group(1))
    for m in re.finditer(r"\btypedef\b", text):
        end, depth = m.end(), 0
        while end < len(text) and (text[end] != ";" or depth):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        stmt = text[m.end():end]
        pointer = re.search(r"\(\s*\*\s*(\w+)\s*\)", stmt.split("{")[0]
                            if "{" not in stmt else stmt[stmt.rfind("}"):])
        plain = re.search(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$", stmt)
        if pointer:
            typedefs.add(pointer.group(1))
        elif plain:
            typedefs.add(plain.group(1))
    for name, static, _ in functions(text):
        if static:
            names.add(name)
    return names | typedefs, typedefs


def takes(text, name, typedefs):
    """Whether text uses name (not as a member, nor a type's name as a
    member's or variable's)."""
    if " " in name:
        kind, tag = name.split()
        return re.search(r"\b" + kind + r"\s+" + tag + r"\b", text)
    after = r"(?!\s*[;,=\[(])" if name in typedefs else ""
    return re.search(r"(?<!\.)(?<!->)\b" + name + r"\b" + after, text)


class Sources:
    def __init__(self, directory):
        self.c = {p.name: without_comments_and_strings(p.read_text())
                  for p in sorted(directory.glob("*.c"))}
        self.h = {p.name: without_comments_and_strings(p.read_text())
                  for p in sorted(directory.glob("*.h"))}

    def owner(self, header):
        c = header[:-2] + ".c"
        return c if c in self.c else header

    def nodes(self):
        """Each node's text: a .c file with its own header, or a header
        that belongs to no .c file; and where it calls: the .c file, and
        a header's inline functions."""
        text, calls = {}, {}
        for name, code in self.c.items():
            own = self.h.get(name[:-2] + ".h", "")
            text[name] = code + "\n" + own
            calls[name] = code + "\n" + inline_bodies(own)
        for name, code in self.h.items():
            if self.owner(name) == name:
                text[name] = code
                calls[name] = inline_bodies(code)
        return text, calls

    def dependencies(self):
        """{file: {file it depends on: [what it takes or calls]}}."""
        text, calls = self.nodes()
        defined = {}
        for name, code in self.c.items():
            for function, static, _ in functions(code):
                if not static:
                    defined.setdefault(function, name)
        given, typedefs = {}, set()
        for header, code in self.h.items():
            names, types = header_names(code)
            typedefs |= types
            for name in names:
                given.setdefault(name, self.owner(header))
        edges = {node: {} for node in text}
        for node, code in text.items():
            declared = set(re.findall(r"\b(?:struct|union)\s+(\w+)\s*;", code))
            code = re.sub(r"\b(?:struct|union)\s+(" + "|".join(declared)
                          + r")\b", " ", code) if declared else code
            for function, home in defined.items():
                if home != node and re.search(r"\b" + function + r"\s*\(",
                                              calls[node]):
                    edges[node].setdefault(home, []).append(function + "()")
            for name, home in sorted(given.items()):
                if home != node and takes(code, name, typedefs):
                    edges[node].setdefault(home, []).append(name)
        return edges

    def includes(self):
        edges = {}
        for name, code in self.h.items():
            edges[name] = {h: ["#include"] for h in INCLUDE.findall(code)
                           if h in self.h and h != name}
        return edges

    def misplaced_declarations(self):
        """(header, function, where it is defined) for each function a
        header declares that another .c file defines."""
        defined = {}
        for name, code in self.c.items():
            for function, static, _ in functions(code):
                if not static:
                    defined.setdefault(function, name)
        found = []
        for header, code in self.h.items():
            owner = self.owner(header)
            if owner == header:
                continue
            for m in DECLARATION.finditer(code):
                home = defined.get(m.group(1))
                if home is not None and home != owner:
                    found.append((header, m.group(1), home))
        return found


def circles(edges):
    """The strongly connected components of more than one node (Tarjan),
    each sorted, and every node's component."""
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
            found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def layer_of(name):
    for rank, (_, _, patterns) in enumerate(LAYERS):
        if any(pathlib.PurePath(name).match(p) for p in patterns):
            return rank
    return len(LAYERS)


def fewest_up(members, edges):
    """An order of a circle's members, bottom up, with the fewest
    dependencies against it (every order tried up to 8 members; beyond,
    by name)."""
    if len(members) > 8:
        return sorted(members)

    def against(order):
        place = {m: i for i, m in enumerate(order)}
        return sum(1 for a in members for b in edges[a]
                   if b in place and place[b] > place[a])

    return list(min(itertools.permutations(sorted(members)), key=against))


def layer_order(edges):
    """Every node bottom up: by layer, and within a layer each node after
    what it depends on."""
    components = circles(edges)        # Tarjan: dependencies first
    order = []
    for component in components:
        order.extend(fewest_up(component, edges) if len(component) > 1
                     else component)
    place = {n: i for i, n in enumerate(order)}
    return sorted(order, key=lambda n: (layer_of(n), place[n]))


def upward(edges, order):
    place = {n: i for i, n in enumerate(order)}
    return [(a, b) for a in order for b in edges[a] if place[b] > place[a]]


def follow(sources, start):
    """The files one function's calls visit, in order."""
    bodies, homes = {}, {}
    for files in (sources.c, sources.h):
        for name, code in files.items():
            for function, static, body in functions(code):
                bodies[(name, function)] = body
                if not static or name.endswith(".h"):
                    homes.setdefault(function, name)

    def resolve(function, here):
        if (here, function) in bodies:
            return here
        return homes.get(function)

    home = resolve(start, None)
    if home is None:
        raise SystemExit(f"check-loops: no function {start}")
    walk, seen = [home], {(home, start)}

    def visit(file, function):
        for m in re.finditer(r"\b(\w+)\s*\(", bodies[(file, function)]):
            callee_home = resolve(m.group(1), file)
            if callee_home is None or (callee_home, m.group(1)) in seen:
                continue
            seen.add((callee_home, m.group(1)))
            if callee_home != walk[-1]:
                walk.append(callee_home)
            visit(callee_home, m.group(1))
            if walk[-1] != file:
                walk.append(file)

    visit(home, start)
    return walk


def main(argv):
    args = argv[1:]
    show_layers = "--layers" in args
    start = None
    if "--follow" in args:
        start = args[args.index("--follow") + 1]
        args.remove("--follow")
        args.remove(start)
    args = [a for a in args if a != "--layers"]
    directory = pathlib.Path(args[0] if args else "server/mpm/bucketed")
    sources = Sources(directory)

    if start is not None:
        walk = follow(sources, start)
        print(" -> ".join(walk))
        print(f"{len(walk)} visits to {len(set(walk))} files, "
              f"{len(walk) - len(set(walk))} turn backs")
        return 0

    failed = False
    edges = sources.dependencies()
    for what, graph in (("dependencies", edges),
                        ("includes", sources.includes())):
        for component in circles(graph):
            if len(component) < 2:
                continue
            failed = True
            print(f"circle of {what}: {' '.join(component)}")
            for a in component:
                for b in component:
                    if b in graph[a]:
                        print(f"  {a} -> {b}: {', '.join(graph[a][b][:6])}")
    order = layer_order(edges)
    up = upward(edges, order)
    for header, function, home in sources.misplaced_declarations():
        failed = True
        print(f"{header} declares {function}(), which {home} defines")
    if show_layers:
        print("layers, bottom up:")
        for rank, (layer, what, _) in enumerate(LAYERS + [("other", "", [])]):
            members = [n for n in order if layer_of(n) == rank]
            if members:
                print(f"  {layer} ({what}): {' '.join(members)}")
    for a, b in up:
        failed = True
        print(f"up: {a} -> {b}: {', '.join(edges[a][b][:6])}")
    if show_layers:
        print(f"{len(up)} dependencies pointing up")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
