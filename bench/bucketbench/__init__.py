"""bucketbench: the benchmark harness of bucketed (see docs/benchmarks.md)."""
