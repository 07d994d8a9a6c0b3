#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when README.md's results table and docs/benchmarks.md's "Today's
results" table disagree: README's rows must be the page's rows of the
families README shows (bench/bucketbench/results_table.py), in the page's
order, with the same figure, commit, date and section.

    scripts/check-results.py [TOP]    (default: this script's checkout)

Prints one line per differing row and exits 1; exits 0 when they agree.
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "bench"))
from bucketbench import results_table  # noqa: E402 (the path above first)


def main(argv):
    top = pathlib.Path(argv[1] if len(argv) > 1 else HERE)
    try:
        page = (top / "docs" / "benchmarks.md").read_text()
        readme = (top / "README.md").read_text()
        messages = results_table.differences(page, readme)
    except (OSError, results_table.TableError) as error:
        messages = [str(error)]
    for message in messages:
        print(f"check-results: {message}")
    return 1 if messages else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
