# SPDX-License-Identifier: Apache-2.0
"""bucketed's status page (mod_bucketed_status), shared by the harness and
the integration tests (test/integration). The page is plain text: header
lines `key=value` (mpm, strategy, reason, kernel, generation, buckets,
steering, migration), then one line per bucket, e.g. `bucket=0 sockets=2
listen=127.0.0.1:8080 127.0.0.1:8081 children=3 idle=2 busy=1 accepted=1234
queue=0 max_queue=4 backlog=1022 drops=0` (fields after accepted= are added
at the end over time; drops= only where the kernel's count means
something, docs/observability.md)."""

import re

from . import configs, stats
from .net import LOOPBACK, http_get

# A bucket line's fields: each value runs up to the next ` key=`, so the
# listen field may hold several space-separated addresses.
_FIELD_START = re.compile(r" +(?=\w+=)")


def _value(text):
    return int(text) if text.isdigit() else text


def _bucket(line):
    bucket = {}
    for field in _FIELD_START.split(line.strip()):
        key, value = field.split("=", 1)
        bucket[key] = value.split() if key == "listen" else _value(value)
    return bucket


def parse_status(text):
    """The page as a dict: each header key with its value (numbers as int),
    and "buckets_list", one dict per bucket line in bucket order (numbers
    as int, listen as a list of addresses)."""
    status = {"buckets_list": []}
    for line in text.splitlines():
        if line.startswith("bucket="):
            status["buckets_list"].append(_bucket(line))
        elif "=" in line:
            key, value = line.split("=", 1)
            status[key] = _value(value)
    status["buckets_list"].sort(key=lambda b: b["bucket"])
    return status


def fetch_status(port, timeout, host=LOOPBACK):
    """The parsed status page of the bucketed server listening on
    host:port; OSError when it does not answer 200."""
    status, body = http_get(port, configs.STATUS_PATH, timeout=timeout,
                            host=host)
    if status != 200:
        raise OSError(f"{configs.STATUS_PATH} answered HTTP {status}")
    return parse_status(body.decode(errors="replace"))


def accepted_delta(before, after):
    """Connections each bucket accepted between two status snapshots, its
    children in the second one (None where the page lacks them), and the
    spread between buckets (see stats.bucket_spread)."""
    accepted_before = {b["bucket"]: b.get("accepted", 0)
                       for b in before["buckets_list"]}
    per_bucket = []
    for bucket in after["buckets_list"]:
        per_bucket.append({
            "bucket": bucket["bucket"],
            "listen": " ".join(bucket.get("listen", [])) or None,
            "accepted": bucket.get("accepted", 0)
            - accepted_before.get(bucket["bucket"], 0),
            "children": bucket.get("children"),
        })
    counts = [b["accepted"] for b in per_bucket]
    return {"strategy": after.get("strategy"),
            "bucket_count": after.get("buckets"),
            "buckets": per_bucket,
            "spread": stats.bucket_spread(counts)}
