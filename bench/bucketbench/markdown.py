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


def ratio(summary):
    """A median of same-round ratios with its range over the rounds:
    `1.02x (0.95-1.10x)`; – without one."""
    if not summary or summary.get("median") is None:
        return "–"
    rounds = [r for r in summary["per_round"] if r is not None]
    return (f"{summary['median']:.2f}x ({min(rounds):.2f}-"
            f"{max(rounds):.2f}x)")


def per_run_range(values):
    """Whole numbers of runs as their range: `0-62`, or `3` when alike."""
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"
