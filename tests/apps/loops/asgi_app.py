# An ASGI application for uvicorn on Python's asyncio loop (tests/integration/loops_test.cpp):
# every request holds the loop QS_CPU_MS milliseconds of CPU, as server.js's "cpu" mode does.
# The loop's own turns are timed here, by the definition qscope uses: from a return of the
# loop's selector (its epoll_wait) to its next call, whether or not the call waited. Every
# 100 ms (when a turn ends) stdout gets
#   TURN mono_ns=<CLOCK_MONOTONIC ns> max_ns=<longest turn since the last GET /reset>
# so a test reads the longest turn over exactly its own window.
#   python3 -m uvicorn --app-dir tests/apps/loops asgi_app:app --loop asyncio --http h11 ...
import asyncio
import os
import time

HOLD_S = float(os.environ.get("QS_CPU_MS", "30")) / 1000.0
state = {"max_ns": 0, "returned_ns": 0, "printed_ns": 0}


def time_turns(selector):
    select = selector.select

    def timed(timeout=None):
        now = time.monotonic_ns()
        if state["returned_ns"]:
            state["max_ns"] = max(state["max_ns"], now - state["returned_ns"])
        if now - state["printed_ns"] >= 100_000_000:
            state["printed_ns"] = now
            print(f"TURN mono_ns={now} max_ns={state['max_ns']}", flush=True)
        events = select(timeout)
        state["returned_ns"] = time.monotonic_ns()
        return events

    selector.select = timed


def hold():
    end = time.perf_counter() + HOLD_S
    x = 0.0
    while time.perf_counter() < end:
        x += (x + 1.0) ** 0.5
    return x


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                time_turns(asyncio.get_running_loop()._selector)
                print("READY", flush=True)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    if scope["path"] == "/reset":
        state["max_ns"] = 0
        body = b"reset\n"
    else:
        hold()
        body = b"ok\n"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
