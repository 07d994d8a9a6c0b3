-- Written by bucketbench for one run; see bench/bucketbench/load.py.
-- The port of each thread, in the order wrk sets them up.
local ports = {"20706", "20706"}
local host = "127.0.0.1"
local threads_set_up = 0

function setup(thread)
    local port = ports[threads_set_up % #ports + 1]
    threads_set_up = threads_set_up + 1
    thread.addr = wrk.lookup(host, port)[1]
end

function done(summary, latency, requests)
    local latency_json = "null"
    if summary.requests > 0 then
        latency_json = string.format(
            '{"min":%d,"mean":%.1f,"max":%d,"stdev":%.1f,' ..
            '"p50":%d,"p90":%d,"p99":%d,"p99.9":%d}',
            latency.min, latency.mean, latency.max, latency.stdev,
            latency:percentile(50), latency:percentile(90),
            latency:percentile(99), latency:percentile(99.9))
    end
    local e = summary.errors
    io.write(string.format(
        'BUCKETBENCH-RESULT {"duration_us":%d,"requests":%d,"bytes":%d,' ..
        '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,' ..
        '"timeout":%d},"latency_us":%s}\n',
        summary.duration, summary.requests, summary.bytes, e.connect,
        e.read, e.write, e.status, e.timeout, latency_json))
end
