"""Scenarios of test_lifecycle.py, each run in a process of its own
(`python lifecycle_scenarios.py NAME`): the hangs they guard against
(a deadlocked interpreter, a forked child stuck on a lock) would otherwise
hang pytest itself. Each prints one JSON line, its report, last; the test
kills a scenario's whole process group after a generous timeout.

The relay comes from the environment: FLAGSTREAM_TEST_RELAY (its URL) and
FLAGSTREAM_TEST_SDK_KEY; FLAGSTREAM_TEST_DIR is a scratch directory. A
stop (the part of `close()`, or of a collected client's drop, that runs
without the GIL) is held at will through the package's private gate
(`_native._hold_next_stop`), so a second `close()` or a fork lands inside
it every time, not by chance.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
from typing import Any, Callable, Dict, List

import flagstream
from flagstream import _native

# How long any wait on an event may take (the test's own timeout is
# longer): a guard against a hang, not a bound on timing.
STEP = 30.0
USER42 = {"key": "user-42", "country": "US", "plan": "enterprise"}
# Nothing listens there (discard): a client that never gets data.
NOWHERE = "http://127.0.0.1:9"


def relay_client(**options: Any) -> flagstream.Client:
    c = flagstream.Client(endpoints=[os.environ["FLAGSTREAM_TEST_RELAY"]],
                          sdk_key=os.environ["FLAGSTREAM_TEST_SDK_KEY"], **options)
    assert c.wait_ready(STEP), c.status()
    return c


def thread(target: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def concurrent_close_held() -> Dict[str, Any]:
    """A second close() while the first is inside its GIL-released part."""
    c = relay_client()
    _native._hold_next_stop()
    first = thread(c.close)
    assert _native._wait_stop_held(STEP), "the first close() never reached its stop"
    second = thread(c.close)
    second.join(STEP)
    report = {"second_returned": not second.is_alive(), "closed": c.closed}
    _native._release_stop()
    first.join(STEP)
    report["first_returned"] = not first.is_alive()
    report["theme"] = c.string("theme", USER42, "light")
    return report


def concurrent_close_race() -> Dict[str, Any]:
    """Ready clients, each closed by four threads released at once."""
    clients = [relay_client() for _ in range(8)]
    returned = 0
    for c in clients:
        start = threading.Barrier(4)

        def close(c: flagstream.Client = c, start: threading.Barrier = start) -> None:
            start.wait()
            c.close()

        threads = [thread(close) for _ in range(4)]
        for t in threads:
            t.join(STEP)
        returned += sum(not t.is_alive() for t in threads)
    return {"returned": returned, "closed": all(c.closed for c in clients)}


def fork_during_close() -> Dict[str, Any]:
    """A fork while another thread is inside close()'s GIL-released part:
    the child evaluates, reads its status, closes, and starts a client of
    its own."""
    c = relay_client()
    _native._hold_next_stop()
    closing = thread(c.close)
    assert _native._wait_stop_held(STEP), "close() never reached its stop"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report over the pipe, never return
        code = 1
        try:
            os.close(r)
            report = {"theme": c.string("theme", USER42, "light"), "status": c.status().state}
            c.close()
            fresh = relay_client()
            report["fresh"] = fresh.string("theme", USER42, "light")
            fresh.close()
            os.write(w, json.dumps(report).encode())
            code = 0
        except BaseException as e:  # reported, then the child exits
            os.write(w, json.dumps({"error": repr(e)}).encode())
        finally:
            os._exit(code)
    os.close(w)
    _native._release_stop()
    closing.join(STEP)
    with os.fdopen(r) as reader:
        child = json.loads(reader.read() or "{}")
    _, status = os.waitpid(pid, 0)
    return {"child": child, "child_exit": os.waitstatus_to_exitcode(status),
            "parent_closed": not closing.is_alive() and c.closed}


def collected_client_stops_without_the_gil() -> Dict[str, Any]:
    """A client dropped without close() (its last reference let go on
    another thread): its stop, which writes the cache, runs without the
    GIL; the cache it wrote serves the next client."""
    cache = os.path.join(os.environ["FLAGSTREAM_TEST_DIR"], "cache")
    # The debounced writer waits an hour: only the final write stores data.
    c = relay_client(cache_dir=cache, cache_write_interval=3600)
    revision = c.status().revision
    box: List[flagstream.Client] = [c]
    del c
    _native._hold_next_stop()
    dropper = thread(lambda: box.clear())
    held = _native._wait_stop_held(STEP)
    # Python runs here while the collected client stops (held or not).
    ran_meanwhile = held and dropper.is_alive()
    _native._release_stop()
    dropper.join(STEP)
    gc.collect()
    again = flagstream.Client(endpoints=[NOWHERE], sdk_key=os.environ["FLAGSTREAM_TEST_SDK_KEY"], cache_dir=cache)
    assert again.wait_ready(STEP), again.status()
    st = again.status()
    again.close()
    return {"held": held, "ran_meanwhile": ran_meanwhile, "dropped": not dropper.is_alive(),
            "source": st.source, "same_revision": st.revision == revision}


def construction_releases_the_gil() -> Dict[str, Any]:
    """A client whose cache directory another client holds waits for it
    (the SDK waits up to 500 ms for a lock a dropped client may still
    hold): another Python thread runs meanwhile. The switch interval is
    raised before that thread starts, so that only a GIL released on
    purpose lets it run before the constructor returns."""
    sys.setswitchinterval(100.0)
    cache = os.path.join(os.environ["FLAGSTREAM_TEST_DIR"], "held-cache")
    holder = flagstream.Client(endpoints=[NOWHERE], sdk_key="sdk-any", cache_dir=cache)
    go = threading.Event()
    ran: List[bool] = []
    # Runs until it blocks in go.wait(): start() waits for it to start.
    runner = thread(lambda: (go.wait(), ran.append(True)))
    go.set()
    waiting = flagstream.Client(endpoints=[NOWHERE], sdk_key="sdk-any", cache_dir=cache)
    ran_during = bool(ran)
    runner.join(STEP)
    waiting.close()
    holder.close()
    return {"ran_during_construction": ran_during, "runner_done": not runner.is_alive()}


if __name__ == "__main__":
    out = globals()[sys.argv[1]]()
    print(json.dumps(out), flush=True)
