# SPDX-License-Identifier: Apache-2.0
"""The statistics of bucketbench on fixed inputs."""
import math

import pytest

from bucketbench import report, stats


@pytest.mark.parametrize("values, pct, expected", [
    ([1, 2, 3, 4], 0, 1),
    ([1, 2, 3, 4], 100, 4),
    ([1, 2, 3, 4], 50, 2.5),
    ([1, 2, 3, 4], 25, 1.75),
    ([4, 1, 3, 2], 75, 3.25),          # order of the input does not matter
    ([7], 99, 7),
    (list(range(1, 1001)), 99.9, 999.001),
])
def test_percentile_interpolates_linearly_between_ranks(values, pct,
                                                        expected):
    assert stats.percentile(values, pct) == pytest.approx(expected)


def test_percentile_of_nothing_is_none():
    assert stats.percentile([], 50) is None


@pytest.mark.parametrize("pct", [-1, 100.5])
def test_percentile_rejects_out_of_range(pct):
    with pytest.raises(ValueError):
        stats.percentile([1, 2], pct)


def test_median_odd_and_even():
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([10, 40, 20, 30]) == 25


def test_stddev_is_the_sample_standard_deviation():
    assert stats.stddev([2, 4, 4, 4, 5, 5, 7, 9]) == \
        pytest.approx(math.sqrt(32 / 7))
    assert stats.stddev([5, 5, 5]) == 0
    assert stats.stddev([5]) is None


def test_summarize_ignores_failed_runs():
    summary = stats.summarize([30, None, 10, 20])
    assert summary == {"n": 3, "min": 10, "median": 20, "max": 30,
                       "stddev": pytest.approx(10.0)}
    assert stats.summarize([None])["median"] is None


def test_round_ratios_pair_runs_of_the_same_round():
    values = {1: 10.0, 2: 20.0, 3: None, 4: 9.0}
    baseline = {1: 5.0, 2: 0.0, 3: 4.0, 4: 3.0}
    # Round 2 has no usable baseline, round 3 no value.
    assert stats.round_ratios(values, baseline) == [2.0, 3.0]
    assert stats.round_ratios({1: 1.0}, {}) == []


def test_bucket_spread():
    assert stats.bucket_spread([100, 50, 150]) == pytest.approx(1.0)
    assert stats.bucket_spread([7, 7]) == 0
    assert stats.bucket_spread([0, 0]) is None
    assert stats.bucket_spread([]) is None


def test_per_thousand():
    assert stats.per_thousand(2.0, 4000) == pytest.approx(0.5)
    assert stats.per_thousand(2.0, 0) is None


def test_summary_takes_ratios_round_by_round(run_record):
    _record = run_record
    records = [
        _record("prefork", 1, 100), _record("event", 1, 50),
        _record("bucketed", 1, 300),
        _record("prefork", 2, 200), _record("event", 2, 100),
        _record("bucketed", 2, 200),
        _record("prefork", 3, 100), _record("event", 3, 100),
        _record("bucketed", 3, 0, ok=False),
    ]
    points = {p["server"]: p for p in report.summarize(records)}
    bucketed = points["bucketed"]
    # Rounds 1 and 2 only: 3.0 and 1.0 against prefork, 6.0 and 2.0 against
    # event; round 3 failed and is left out, not counted as zero.
    assert bucketed["ratios"]["prefork"]["per_round"] == [3.0, 1.0]
    assert bucketed["ratios"]["prefork"]["median"] == pytest.approx(2.0)
    assert bucketed["ratios"]["event"]["median"] == pytest.approx(4.0)
    assert bucketed["ok_runs"] == 2 and len(bucketed["failures"]) == 1
    assert bucketed["rps"]["median"] == 250
    assert bucketed["errors"]["timeout"] == 2
    assert "prefork" not in points["prefork"]["ratios"]
    assert points["event"]["ratios"]["prefork"]["median"] == \
        pytest.approx(0.5)
