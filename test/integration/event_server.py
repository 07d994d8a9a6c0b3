# SPDX-License-Identifier: Apache-2.0
"""Helpers of the ChildModel event tests (test_event_*.py): an event
server, its sizing, a keep-alive load that counts what a client loses,
and mod_status's fields."""
import http.client
import subprocess

from bucketbench.clients import KeepAliveClients
from httpd_fixture import (APACHE_MODULES, HTTP_TIMEOUT, INDEX_BODY, LOOPBACK,
                           http_get)


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


class KeepAliveLoad(KeepAliveClients):
    """bucketbench.clients.KeepAliveClients GETting / (the index body)."""

    def __init__(self, ports, threads=4, seconds=90, minimum=0, pause=0.0,
                 post=None):
        super().__init__(ports, ("/", INDEX_BODY), threads=threads,
                         seconds=seconds, minimum=minimum, pause=pause,
                         post=post)


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


