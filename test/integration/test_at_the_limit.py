# SPDX-License-Identifier: Apache-2.0
"""At MaxRequestWorkers, the free child serves whichever bucket the client
came to. Every child but one holds an idle keep-alive connection (Debian's
KeepAlive On, a long KeepAliveTimeout), as a PHP site's few large children
do at a traffic peak; then new clients come one at a time. With one accept
queue (stock prefork) the free child takes each; with buckets, the kernel's
hash may send a client to a bucket whose children all hold keep-alive
connections, where it would wait out the KeepAliveTimeout. BucketSteering
auto (load steering) sends it to the bucket that has the free child."""
import socket

import pytest

from httpd_fixture import CHILD_MODELS, LOOPBACK

KEEPALIVE_TIMEOUT = 30
# Far below KEEPALIVE_TIMEOUT: a probe that waits for a keep-alive
# connection to expire fails; one served by the free child does not.
PROBE_TIMEOUT = 10
PROBES = 20

LIMITS = {
    "prefork": "MaxRequestWorkers {n}\nServerLimit {n}\nStartServers {n}\n"
               "MinSpareServers 1\nMaxSpareServers {n}\n",
    "event": "ThreadsPerChild 1\nMaxRequestWorkers {n}\nServerLimit {n}\n"
             "StartServers {n}\nMinSpareThreads 1\nMaxSpareThreads {n}\n"
             "AsyncRequestWorkerFactor 1\n",
}


def keepalive_connection(port):
    c = socket.create_connection((LOOPBACK, port), PROBE_TIMEOUT)
    c.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert c.recv(4096).startswith(b"HTTP/1.1 200")
    return c


def probe(port):
    with socket.create_connection((LOOPBACK, port), PROBE_TIMEOUT) as c:
        c.settimeout(PROBE_TIMEOUT)
        c.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n"
                  b"Connection: close\r\n\r\n")
        return c.recv(4096)[:12]


@pytest.mark.parametrize("workers,buckets", [(7, 2), (20, 2), (20, 4)])
def test_one_free_child_serves_every_bucket(make_httpd, child_model,
                                            workers, buckets):
    server = make_httpd(directives=CHILD_MODELS[child_model]
                        + LIMITS[child_model].format(n=workers)
                        + f"BucketCount {buckets}\nKeepAlive On\n"
                        f"KeepAliveTimeout {KEEPALIVE_TIMEOUT}\n")
    server.start()
    port = server.ports[0]
    held = [keepalive_connection(port) for _ in range(workers - 1)]
    try:
        answers = [probe(port) for _ in range(PROBES)]
    finally:
        for c in held:
            c.close()
    assert answers == [b"HTTP/1.1 200"] * PROBES
