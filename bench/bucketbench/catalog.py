"""What can be benchmarked: the server configurations, the workloads and the
kernel feature levels, by the names the command line and the reports use."""

from dataclasses import dataclass, field

NATIVE = "native"
NO_REUSEPORT = "no-reuseport"

KERNEL_LEVELS = {
    NATIVE: "this machine's kernel as it is",
    NO_REUSEPORT: "emulated kernel before 3.9: LD_PRELOAD shim "
                  "bench/noreuseport.so makes setsockopt(SO_REUSEPORT) fail "
                  "with ENOPROTOOPT in every server",
}


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    listen_count: int        # Listen statements (ports) the servers get
    keep_alive: bool         # False: every request on a new connection


WORKLOADS = {
    "w1": Workload("w1", "one Listen, Connection: close (accept path)",
                   listen_count=1, keep_alive=False),
    "w2": Workload("w2", "two Listen ports, load split evenly, "
                   "Connection: close", listen_count=2, keep_alive=False),
    "w3": Workload("w3", "one Listen, keep-alive", listen_count=1,
                   keep_alive=True),
}


@dataclass(frozen=True)
class ServerSpec:
    name: str
    label: str
    kind: str                      # "httpd" or "nginx"
    mpm: str = ""                  # prefork, event or bucketed for httpd
    directives: tuple = ()         # extra httpd directives
    # Kernel levels where this row means nothing, with the reason shown.
    not_applicable: dict = field(default_factory=dict)


SERVERS = {spec.name: spec for spec in (
    ServerSpec("prefork", "stock prefork", "httpd", "prefork"),
    ServerSpec("prefork-lcbr1", "stock prefork, ListenCoresBucketsRatio 1",
               "httpd", "prefork", ("ListenCoresBucketsRatio 1",)),
    ServerSpec("event", "stock event", "httpd", "event"),
    ServerSpec("event-lcbr1", "stock event, ListenCoresBucketsRatio 1",
               "httpd", "event", ("ListenCoresBucketsRatio 1",)),
    ServerSpec("bucketed-reuseport", "bucketed, BucketStrategy reuseport",
               "httpd", "bucketed",
               ("BucketStrategy reuseport", "BucketCount auto"),
               {NO_REUSEPORT: "BucketStrategy reuseport refuses to start "
                              "without SO_REUSEPORT; bucketed-auto shows "
                              "the fallback at this level"}),
    ServerSpec("bucketed-listen", "bucketed, BucketStrategy listen",
               "httpd", "bucketed",
               ("BucketStrategy listen", "BucketCount auto")),
    ServerSpec("bucketed-single", "bucketed, BucketStrategy single",
               "httpd", "bucketed",
               ("BucketStrategy single", "BucketCount auto")),
    ServerSpec("bucketed-auto", "bucketed, BucketStrategy auto",
               "httpd", "bucketed",
               ("BucketStrategy auto", "BucketCount auto"),
               {NATIVE: "with SO_REUSEPORT, auto picks reuseport: same as "
                        "the bucketed-reuseport row"}),
    ServerSpec("nginx", "nginx, listen reuseport (reference ceiling)",
               "nginx"),
)}

# Baselines for the run-by-run ratios.
RATIO_BASELINES = ("prefork", "event")


def server_label(spec, level):
    """nginx cannot use reuseport where the kernel lacks it; say so."""
    if spec.kind == "nginx" and level == NO_REUSEPORT:
        return "nginx, shared listen socket (no reuseport)"
    return spec.label
