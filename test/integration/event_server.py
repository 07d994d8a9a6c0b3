# SPDX-License-Identifier: Apache-2.0
"""Helpers of the ChildModel event tests (test_event_*.py): an event
server, its sizing, a keep-alive load that counts what a client loses,
and mod_status's fields."""
import http.client
import random
import select
import subprocess
import threading
import time

from httpd_fixture import (APACHE_MODULES, HTTP_TIMEOUT, INDEX_BODY, LOOPBACK,
                           Load, http_get, wall_clock)


EVENT = "ChildModel event\n"


def event_server(make_httpd, extra="", **kwargs):
    return make_httpd(directives=EVENT + extra, **kwargs)


def sized(buckets, threads, workers, start, spare):
    """The sizing directives of a test's event server: BucketCount,
    ThreadsPerChild, MaxRequestWorkers, StartServers and the
    (MinSpareThreads, MaxSpareThreads) pair."""
    return (f"BucketCount {buckets}\nThreadsPerChild {threads}\n"
            f"MaxRequestWorkers {workers}\nStartServers {start}\n"
            f"MinSpareThreads {spare[0]}\nMaxSpareThreads {spare[1]}\n")


def module_line(name, so):
    return f"LoadModule {name}_module {APACHE_MODULES}/{so}"


def tls_vhost(tmp_path, port):
    """A self-signed ECDSA P-256 certificate made with openssl in tmp_path,
    and the directives of a TLS virtual host on port serving with it:
    (certificate path, directives)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=localhost", "-days", "1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    key.chmod(0o644)
    return cert, (module_line("ssl", "mod_ssl.so") + "\n"
                  + module_line("socache_shmcb", "mod_socache_shmcb.so")
                  + "\n"
                  f"Listen {LOOPBACK}:{port} https\n"
                  f"<VirtualHost {LOOPBACK}:{port}>\n"
                  "  SSLEngine on\n"
                  f"  SSLCertificateFile {cert}\n"
                  f"  SSLCertificateKeyFile {key}\n"
                  "</VirtualHost>\n")


class KeepAliveLoad(Load):
    """Load's clients, each on one persistent connection, making requests
    over and over until stop() (after at least `minimum` requests in all):
    GET /, answered 200 with the index body, or, with `post` = (path, body,
    answer), half of them (at random) a POST of body to path, answered 200
    with `answer`. Each client pauses up to `pause` seconds (at random)
    between its requests.

    A client reuses its connection as curl does: first a poll that does not
    wait; a readable connection (the server closed it while it was idle, as
    it may at any time, RFC 9112 9.6) is closed and a new one opened, which
    is no failure (counted in `reopened`). Any error once the request is
    being sent is a failure, on new and reused connections alike: a GET
    that failed on a reused connection is made again on a new one (counted
    in `retries` too), a POST never is (RFC 9110 9.2.2; counted in
    `posts_lost`). Responses that closed the connection ("Connection:
    close", as a stopping server says) are counted in `told_to_close`."""

    def __init__(self, ports, threads=4, seconds=90, minimum=0, pause=0.0,
                 post=None):
        super().__init__(ports, count=10 ** 9, threads=threads,
                         seconds=seconds, minimum=minimum)
        self.pause = pause
        self.post = post
        self.reopened = 0
        self.told_to_close = 0
        self.retries = 0
        self.posts_lost = 0
        self._lock = threading.Lock()

    def _count(self, name):
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def _request(self, conn, post):
        if post:
            path, body, answer = self.post
            conn.request("POST", path, body=body,
                         headers={"Content-Type": "application/octet-stream"})
        else:
            answer = INDEX_BODY
            conn.request("GET", "/")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200 or body != answer:
            return f"status {resp.status}, body {body[:80]!r}"
        return None

    @staticmethod
    def _closed_while_idle(conn):
        """Whether the server has closed (or reset) an idle connection: it
        is readable before we sent anything."""
        poller = select.poll()
        poller.register(conn.sock, select.POLLIN)
        return bool(poller.poll(0))

    def _work(self, deadline):
        port = self.ports[next(self._tickets) % len(self.ports)]
        rng = random.Random()
        conn = None
        retry = post = False
        while time.monotonic() < deadline and not (
                self._stop.is_set() and self.result.total >= self.minimum):
            if conn is None:
                conn = http.client.HTTPConnection(LOOPBACK, port,
                                                  timeout=HTTP_TIMEOUT)
            # http.client drops the socket after "Connection: close".
            reused = conn.sock is not None
            if reused and self._closed_while_idle(conn):
                conn.close()
                self._count("reopened")
                reused = False
            if not retry:
                post = self.post is not None and rng.random() < 0.5
            try:
                error = self._request(conn, post)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = None
                error = repr(e)
            if error is not None:
                error = (f"{wall_clock()} port {port}: "
                         f"{'POST' if post else 'GET'} on a "
                         f"{'reused' if reused else 'new'} connection: "
                         f"{error}")
            self.result.record(error)
            if conn is not None and conn.sock is None:
                self._count("told_to_close")
            if error is not None and post:
                self._count("posts_lost")
            retry = (error is not None and not post and reused
                     and conn is None)
            if retry:
                self._count("retries")
                continue
            if self.pause:
                self._stop.wait(rng.uniform(0, self.pause))
        if conn is not None:
            conn.close()


def get_index(conns):
    """One keep-alive GET / on each connection, each answered in full."""
    for c in conns:
        c.request("GET", "/")
        r = c.getresponse()
        assert (r.status, r.read()) == (200, INDEX_BODY)


def open_keepalive(port, count):
    """count connections, each having made one keep-alive request."""
    conns = [http.client.HTTPConnection(LOOPBACK, port, timeout=HTTP_TIMEOUT)
             for _ in range(count)]
    get_index(conns)
    return conns



def status_fields(port):
    """mod_status's ?auto page as a dict."""
    _, text = http_get(port, "/server-status?auto")
    return dict(line.split(": ", 1) for line in text.decode().splitlines()
                if ": " in line)


STATUS = (module_line("status", "mod_status.so") + "\n"
          "<Location /server-status>\n  SetHandler server-status\n"
          "</Location>\n")


