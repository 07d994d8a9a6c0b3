# SPDX-License-Identifier: Apache-2.0
"""A real Prometheus server for the integration tests, scraping one target
on loopback."""
import json
import shutil
import signal
import subprocess
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

from httpd_fixture import HTTP_TIMEOUT, LOOPBACK, free_ports, wait_until

PROMETHEUS_CONFIG = """
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: bucketed
    metrics_path: /metrics
    static_configs:
      - targets: ['{target}']
"""


class Prometheus:
    """A real Prometheus server on a loopback port, scraping one target
    every second, with its storage in a directory of its own."""

    def __init__(self, target):
        self.dir = Path(tempfile.mkdtemp(prefix="bucketed-prom-"))
        self.port = free_ports(1)[0]
        config = self.dir / "prometheus.yml"
        config.write_text(PROMETHEUS_CONFIG.format(target=target))
        self.log = open(self.dir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [shutil.which("prometheus"), f"--config.file={config}",
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address={LOOPBACK}:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT)

    def get(self, path):
        url = f"http://{LOOPBACK}:{self.port}{path}"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as resp:
            return resp.status, resp.read()

    def wait_ready(self):
        def ready():
            assert self.proc.poll() is None, self.output()
            return self.get("/-/ready")[0] == 200
        wait_until(ready, 60, interval=0.2, what="Prometheus to be ready")

    def query(self, expr):
        """The result vector of an instant query."""
        status, body = self.get("/api/v1/query?"
                                + urllib.parse.urlencode({"query": expr}))
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", answer
        return answer["data"]["result"]

    def output(self):
        return (self.dir / "prometheus.log").read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
