# SPDX-License-Identifier: Apache-2.0
"""Statistics over benchmark runs. Pure functions on plain numbers, so the
unit tests can pin every definition down on fixed inputs."""

import math


def percentile(values, pct):
    """The pct-th percentile (0..100) with linear interpolation between the
    two nearest ranks, the definition numpy and spreadsheets use by default.
    None for no values: an empty point has no percentile, not a zero one."""
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile must be within 0..100, got {pct}")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * pct / 100.0
    lower = math.floor(rank)
    upper = math.ceil(rank)
    fraction = rank - lower
    return ordered[lower] + (ordered[upper] - ordered[lower]) * fraction


def median(values):
    return percentile(values, 50)


def stddev(values):
    """Sample standard deviation (n - 1): the runs are a sample of what the
    configuration does. None below two values, where it is undefined."""
    count = len(values)
    if count < 2:
        return None
    mean = sum(values) / count
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (count - 1))


def summarize(values):
    """Min, median, max and standard deviation of one point's runs."""
    values = [v for v in values if v is not None]
    if not values:
        return {"n": 0, "min": None, "median": None, "max": None,
                "stddev": None}
    return {"n": len(values), "min": min(values), "median": median(values),
            "max": max(values), "stddev": stddev(values)}


def round_ratios(values_by_round, baseline_by_round):
    """Ratios taken round by round: value / baseline for each round where
    both were measured and the baseline is non-zero. Both arguments map a
    round number to a value (None for a failed run). Pairing runs of the
    same round cancels the drift of a shared, noisy machine between rounds."""
    ratios = []
    for round_no in sorted(values_by_round):
        value = values_by_round[round_no]
        baseline = baseline_by_round.get(round_no)
        if value is None or not baseline:
            continue
        ratios.append(value / baseline)
    return ratios


def bucket_spread(accepted_counts):
    """How unevenly connections reached the buckets: (max - min) / mean of
    the per-bucket accepted counts. 0 is perfectly even; None when there is
    nothing to compare (no buckets or no connections)."""
    if not accepted_counts:
        return None
    mean = sum(accepted_counts) / len(accepted_counts)
    if mean == 0:
        return None
    return (max(accepted_counts) - min(accepted_counts)) / mean


def per_thousand(amount, requests):
    """amount (e.g. CPU seconds) per 1,000 requests; None without requests."""
    if not requests:
        return None
    return amount * 1000.0 / requests
