"""bucketed's status page (mod_bucketed_status): how many connections each
listener bucket has accepted. The page is plain text: `key=value` header
lines (strategy=..., buckets=...) and one line per bucket, e.g.
`bucket=0 sockets=1 listen=127.0.0.1:8080 children=3 idle=2 busy=1
accepted=1234`."""

from . import configs, stats
from .server import http_get


def parse_status(text):
    """{"strategy": str|None, "bucket_count": int|None, "buckets":
    [{"bucket": int, "accepted": int, ...}]} from the page's text. Numbers
    become ints; unknown keys are kept as they are."""
    header = {}
    buckets = []
    for line in text.splitlines():
        pairs = dict(token.split("=", 1) for token in line.split()
                     if "=" in token)
        if not pairs:
            continue
        values = {key: int(value) if value.isdigit() else value
                  for key, value in pairs.items()}
        if "bucket" in values:
            buckets.append(values)
        else:
            header.update(values)
    return {"strategy": header.get("strategy"),
            "bucket_count": header.get("buckets"),
            "buckets": sorted(buckets, key=lambda b: b["bucket"])}


def fetch_status(port):
    """The parsed status page of the bucketed server listening on port."""
    status, body = http_get(port, configs.STATUS_PATH)
    if status != 200:
        raise OSError(f"{configs.STATUS_PATH} answered HTTP {status}")
    return parse_status(body.decode(errors="replace"))


def accepted_delta(before, after):
    """Connections each bucket accepted between two status snapshots, and
    the spread between buckets (see stats.bucket_spread)."""
    accepted_before = {b["bucket"]: b.get("accepted", 0)
                       for b in before["buckets"]}
    per_bucket = []
    for bucket in after["buckets"]:
        per_bucket.append({
            "bucket": bucket["bucket"],
            "listen": bucket.get("listen"),
            "accepted": bucket.get("accepted", 0)
            - accepted_before.get(bucket["bucket"], 0),
        })
    counts = [b["accepted"] for b in per_bucket]
    return {"strategy": after["strategy"],
            "bucket_count": after["bucket_count"],
            "buckets": per_bucket,
            "spread": stats.bucket_spread(counts)}
