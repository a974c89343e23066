-- wrk script for the scenario load: each connection is one client looping request →
-- response → think time. Counts responses by status and prints one JSON line at the end
-- (the load tool's own oracle). Args after `--`: PATH [THINK_MS] [QUOTE_PERCENT]
--   PATH           /db, /ping, /quote
--   THINK_MS       mean pause before each request (0: closed loop), drawn uniformly from
--                  0.5–1.5× so clients do not move in lockstep (a fixed pause keeps the
--                  first wave together: 1,000 requests at once, then nothing for a second)
--   QUOTE_PERCENT  send that share of requests to /quote instead of PATH
local threads = {}

function setup(thread)
    table.insert(threads, thread)
end

function init(args)
    path = args[1] or "/db"
    think = tonumber(args[2] or "0") or 0
    quote_pct = tonumber(args[3] or "0") or 0
    n2xx, n3xx, n4xx, n5xx, nother, nquote = 0, 0, 0, 0, 0, 0
    math.randomseed(os.time() + (tonumber(tostring(wrk.thread):match("0x(%x+)") or "0", 16) % 100000))
end

function delay()
    if think <= 0 then return 0 end
    return math.floor(think * (0.5 + math.random()))
end

function request()
    if quote_pct > 0 and math.random(100) <= quote_pct then
        nquote = nquote + 1
        return wrk.format("GET", "/quote")
    end
    return wrk.format("GET", path)
end

function response(status, headers, body)
    if status >= 200 and status < 300 then n2xx = n2xx + 1
    elseif status < 400 and status >= 300 then n3xx = n3xx + 1
    elseif status < 500 and status >= 400 then n4xx = n4xx + 1
    elseif status < 600 and status >= 500 then n5xx = n5xx + 1
    else nother = nother + 1 end
end

function done(summary, latency, requests)
    local c = {n2xx = 0, n3xx = 0, n4xx = 0, n5xx = 0, nother = 0, nquote = 0}
    for _, t in ipairs(threads) do
        for k, _ in pairs(c) do c[k] = c[k] + (t:get(k) or 0) end
    end
    local e = summary.errors
    io.write(string.format(
        'WRK_JSON {"duration_s":%.3f,"requests":%d,"bytes":%d,"status":{"2xx":%d,"3xx":%d,"4xx":%d,"5xx":%d,"other":%d},' ..
        '"quote_sent":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
        '"latency_s":{"p50":%.6f,"p90":%.6f,"p99":%.6f,"max":%.6f,"mean":%.6f}}\n',
        summary.duration / 1e6, summary.requests, summary.bytes, c.n2xx, c.n3xx, c.n4xx, c.n5xx, c.nother,
        c.nquote, e.connect, e.read, e.write, e.status, e.timeout,
        latency:percentile(50) / 1e6, latency:percentile(90) / 1e6, latency:percentile(99) / 1e6,
        latency.max / 1e6, latency.mean / 1e6))
end
