# SPDX-License-Identifier: Apache-2.0
"""The Markdown every report section of the harness is written in."""


def table(header, rows):
    """A Markdown table: the header, its rule, one line per row (cells
    turned into text)."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |"
              for row in rows]
    return "\n".join(lines)
