# SPDX-License-Identifier: Apache-2.0
"""Flame graphs: folded stacks in, a standalone SVG out. Pure.

Folded stacks are {("outermost", ..., "leaf"): samples}. The graph stacks
frames bottom-up: the root bar spans every sample, each frame sits on its
caller and is as wide as the samples that passed through it, siblings
sorted by name so that equal stacks from two servers line up alike. Each
bar carries a <title> (the frame, its samples and share) that browsers
show on hover. A colour per category (profile.CATEGORIES, given by the
caller as frame -> category) tells the MPM, httpd, OpenSSL and the kernel
paths apart at a glance."""

from html import escape

WIDTH = 1200
FRAME_HEIGHT = 16
FONT_SIZE = 11
# Roughly the width of one character of FONT_SIZE monospace.
CHAR_WIDTH = 6.6
TOP_MARGIN = 40
# Bars narrower than this (pixels) are dropped: unreadable, and they
# bloat the file.
MIN_WIDTH = 0.3
DEFAULT_COLOUR = "#c8c8c8"


def _tree(folded):
    """Nested {name: [samples, children]} from folded stacks."""
    root = [0, {}]
    for stack, samples in folded.items():
        root[0] += samples
        node = root
        for frame in stack:
            child = node[1].setdefault(frame, [0, {}])
            child[0] += samples
            node = child
    return root


def _depth(node):
    return 1 + max((_depth(child) for child in node[1].values()), default=0)


def render(folded, title, colour_of=None, legend=()):
    """The SVG text of folded's flame graph. colour_of(frame) -> "#rrggbb"
    or None; legend: [(label, colour)] drawn under the title."""
    root = _tree(folded)
    total = root[0]
    depth = _depth(root)
    height = TOP_MARGIN + depth * FRAME_HEIGHT + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
           f'height="{height}" viewBox="0 0 {WIDTH} {height}" '
           f'font-family="monospace" font-size="{FONT_SIZE}">',
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
           f'<text x="4" y="14" font-size="13">{escape(title)} '
           f'({total} samples)</text>']
    x = 4.0
    for label, colour in legend:
        out.append(f'<rect x="{x:.1f}" y="20" width="10" height="10" '
                   f'fill="{colour}"/>')
        out.append(f'<text x="{x + 13:.1f}" y="29">{escape(label)}</text>')
        x += 13 + len(label) * CHAR_WIDTH + 12
    if total:
        scale = (WIDTH - 8) / total
        _draw(out, root, scale, total, colour_of, height)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _draw(out, root, scale, total, colour_of, height):
    """Draws the root bar and every frame on top of its caller,
    iteratively (deep kernel stacks would exhaust Python's recursion
    otherwise)."""
    pending = [("all", root, 4.0, 0)]
    while pending:
        name, node, x, level = pending.pop()
        width = node[0] * scale
        if width < MIN_WIDTH:
            continue
        y = height - 10 - (level + 1) * FRAME_HEIGHT
        colour = (colour_of(name) if colour_of else None) or DEFAULT_COLOUR
        share = 100.0 * node[0] / total
        label = escape(f"{name} ({node[0]} samples, {share:.2f} %)")
        out.append(f'<g><title>{label}</title><rect x="{x:.2f}" y="{y}" '
                   f'width="{width:.2f}" height="{FRAME_HEIGHT - 1}" '
                   f'fill="{colour}" rx="1"/>')
        chars = int((width - 4) / CHAR_WIDTH)
        if chars >= 3:
            text = name if len(name) <= chars else name[:chars - 2] + ".."
            out.append(f'<text x="{x + 2:.2f}" y="{y + FRAME_HEIGHT - 4}">'
                       f'{escape(text)}</text>')
        out.append("</g>")
        child_x = x
        for child_name in sorted(node[1]):
            child = node[1][child_name]
            pending.append((child_name, child, child_x, level + 1))
            child_x += child[0] * scale
