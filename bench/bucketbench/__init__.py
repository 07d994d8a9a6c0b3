# SPDX-License-Identifier: Apache-2.0
"""bucketbench: the benchmark harness of bucketed (see docs/benchmarks.md).
Its command is `python3 -m bucketbench` (or bench/run).

net, procfs and bucket_status are shared with the integration tests
(test/integration/httpd_fixture.py): loopback ports and HTTP requests, /proc
readings, and the parser of bucketed's status page. pytest.ini puts bench/
on the tests' import path."""
