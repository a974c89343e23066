// An event-loop server for tests/integration/loops_test.cpp: every request on the main port
// holds the event loop (mode "cpu": spins on the CPU for MS milliseconds; mode "block": a
// synchronous child process, `sleep` for MS milliseconds), or (mode "pool") calls the HTTP
// server on BACKEND_PORT through an http.Agent of MS sockets, where the requests beyond MS
// queue in the agent, in the loop, with no thread: every 100 ms stdout gets
//   POOL mono_ns=<CLOCK_MONOTONIC ns> queued=<requests waiting for a socket> busy=<sockets in use>
// from the agent's own tables (agent.requests, agent.sockets). The stats port reports Node's own
// event-loop delay (perf_hooks.monitorEventLoopDelay), the oracle for qscope's longest turn;
// every 100 ms (when the loop lets its timer run) stdout gets
//   ELD mono_ns=<CLOCK_MONOTONIC ns> max_ns=<max delay since the last /reset>
// so a test can read the delay over exactly its own window.
//   node server.js PORT STATS_PORT MODE MS [BACKEND_PORT]
// Prints "READY port=PORT" when both ports listen.
'use strict';
const http = require('http');
const { monitorEventLoopDelay } = require('perf_hooks');
const { execSync } = require('child_process');

const [port, statsPort, mode, ms, backend] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4],
                                              Number(process.argv[5]), Number(process.argv[6])];
const agent = new http.Agent({ keepAlive: true, maxSockets: ms });
const eld = monitorEventLoopDelay({ resolution: 1 });
eld.enable();
let served = 0;

function hold() {
  if (mode === 'cpu') {
    const end = performance.now() + ms;
    let x = 0;
    while (performance.now() < end) x += Math.sqrt(x + 1);
    return x;
  }
  execSync('sleep ' + (ms / 1000));
  return 0;
}

function call(res) {
  http.get({ host: '127.0.0.1', port: backend, path: '/', agent }, (up) => {
    up.resume();
    up.on('end', () => {
      served++;
      res.end('ok\n');
    });
  }).on('error', () => {
    res.statusCode = 502;
    res.end();
  });
}

const main = http.createServer((req, res) => {
  if (mode === 'pool') return call(res);
  hold();
  served++;
  res.end('ok\n');
});
main.keepAliveTimeout = 60000;

const stats = http.createServer((req, res) => {
  if (req.url === '/reset') {
    eld.reset();
    served = 0;
    res.end('reset\n');
    return;
  }
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ eld_max_ns: eld.max, eld_p99_ns: eld.percentile(99), eld_count: eld.count, served }) +
          '\n');
});

const count = (table) => Object.values(table).reduce((n, list) => n + list.length, 0);
setInterval(() => {
  const now = process.hrtime.bigint();
  console.log('ELD mono_ns=' + now + ' max_ns=' + eld.max);
  if (mode === 'pool') console.log('POOL mono_ns=' + now + ' queued=' + count(agent.requests) + ' busy=' + count(agent.sockets));
}, 100);

main.listen(port, '127.0.0.1', () => {
  stats.listen(statsPort, '127.0.0.1', () => console.log('READY port=' + port));
});
