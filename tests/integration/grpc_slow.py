"""A gRPC server and client for tests/integration/grpc_test.cpp, on Debian's python3-grpcio
(C-core: cleartext HTTP/2, h2c), with no generated stubs: the generic API, bytes in and out.

  grpc_slow.py server --port P --counters-file F
      qs.Slow/Call sleeps 100 ms +- 40 ms (uniform) and answers b"ok"; qs.Slow/Fail aborts with
      UNAVAILABLE after ~1 ms. Its own counters, rewritten atomically (temp file + rename) every
      10 ms as one line of JSON: in_flight (Call handlers running now), completed (Calls
      answered), failed (Fails answered), p50_service_s (median time spent in Call's handler,
      every Call so far), time_ms (unix ms of the write). Prints "READY port=P" once serving.

  grpc_slow.py client --port P --concurrency N [--seconds S] [--ok K --fail M] [--start-file F]
      ONE channel (one HTTP/2 connection), N calls kept in flight by N threads. With --ok/--fail:
      exactly K Calls and M Fails (every 4th call a Fail while both remain), then exit; else Calls
      until S seconds have passed or SIGTERM. Prints "RESULT ok=A failed=B other=C" at the end:
      A Calls answered OK, B Fails answered UNAVAILABLE, C anything else (a failure of the test).
      --start-file: connect only once F exists (a tool attaches to the client first).
      --fail-file F: without --ok/--fail, every 4th call is a Fail once F exists (a tool attached
      to a channel already busy sees Fails begin).
"""
import argparse
import bisect
import json
import os
import random
import signal
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE_S, JITTER_S = 0.100, 0.040


def serve(args):
    lock = threading.Lock()
    st = {"in_flight": 0, "completed": 0, "failed": 0}
    service = []  # every Call's time in the handler, sorted

    def call(request, context):
        t0 = time.monotonic()
        with lock:
            st["in_flight"] += 1
        time.sleep(random.uniform(SERVICE_S - JITTER_S, SERVICE_S + JITTER_S))
        with lock:
            st["in_flight"] -= 1
            st["completed"] += 1
            bisect.insort(service, time.monotonic() - t0)
        return b"ok"

    def fail(request, context):
        time.sleep(0.001)
        with lock:
            st["failed"] += 1
        context.abort(grpc.StatusCode.UNAVAILABLE, "qs.Slow/Fail always fails")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("qs.Slow", {
        "Call": grpc.unary_unary_rpc_method_handler(call),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
    }),))
    port = server.add_insecure_port("127.0.0.1:%d" % args.port)
    if port != args.port:
        sys.exit("cannot listen on 127.0.0.1:%d" % args.port)
    server.start()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    tmp = "%s.tmp.%d" % (args.counters_file, os.getpid())

    def write():
        with lock:
            c = dict(st)
            c["p50_service_s"] = service[len(service) // 2] if service else 0.0
        c["time_ms"] = time.time() * 1000
        with open(tmp, "w") as f:
            f.write(json.dumps(c) + "\n")
        os.rename(tmp, args.counters_file)

    write()
    print("READY port=%d" % port, flush=True)
    while not stop.wait(0.010):
        write()
    server.stop(0.5).wait()
    write()


def client(args):
    # --start-file: wait for it before connecting, so that a tool attached to this process sees
    # the connection from its first byte (the HTTP/2 preface).
    while args.start_file and not os.path.exists(args.start_file):
        time.sleep(0.01)
    channel = grpc.insecure_channel("127.0.0.1:%d" % args.port)
    grpc.channel_ready_future(channel).result(timeout=10)
    ok_call = channel.unary_unary("/qs.Slow/Call")
    fail_call = channel.unary_unary("/qs.Slow/Fail")
    lock = threading.Lock()
    tally = {"ok": 0, "failed": 0, "other": 0}
    left = {"ok": args.ok, "fail": args.fail, "n": 0}
    fixed = args.ok is not None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + args.seconds

    def next_call():
        """The next call to make, or None when done."""
        if stop.is_set() or time.monotonic() >= deadline:
            return None
        if not fixed:
            if args.fail_file and os.path.exists(args.fail_file):
                with lock:
                    left["n"] += 1
                    return fail_call if left["n"] % 4 == 0 else ok_call
            return ok_call
        with lock:
            left["n"] += 1
            if left["fail"] > 0 and (left["n"] % 4 == 0 or left["ok"] == 0):
                left["fail"] -= 1
                return fail_call
            if left["ok"] > 0:
                left["ok"] -= 1
                return ok_call
            return None

    def worker():
        while True:
            fn = next_call()
            if fn is None:
                return
            try:
                fn(b"x", timeout=10)
                key = "ok" if fn is ok_call else "other"
            except grpc.RpcError as e:
                key = "failed" if fn is fail_call and e.code() == grpc.StatusCode.UNAVAILABLE else "other"
                if key == "other":
                    with lock:
                        if tally["other"] < 5:
                            print("unexpected: %s %s" % (e.code(), e.details()), file=sys.stderr, flush=True)
                    time.sleep(0.01)  # the server is gone: do not spin
            with lock:
                tally[key] += 1

    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.05)
    channel.close()
    print("RESULT ok=%d failed=%d other=%d" % (tally["ok"], tally["failed"], tally["other"]), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--counters-file")
    p.add_argument("--concurrency", type=int, default=40)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--ok", type=int)
    p.add_argument("--fail", type=int, default=0)
    p.add_argument("--start-file")
    p.add_argument("--fail-file")
    args = p.parse_args()
    if args.role == "server":
        if not args.counters_file:
            p.error("server needs --counters-file")
        serve(args)
    else:
        client(args)


if __name__ == "__main__":
    main()
