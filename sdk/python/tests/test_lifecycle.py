"""Starting and stopping clients cannot hang the interpreter: concurrent
close() calls, a fork while close() runs, a client collected without
close(), a constructor that waits for its cache, and a forked child's
first evaluations (which read the parent's snapshot, never the parent's
Rust client, whose locks a parent thread may have held at the fork).

The scenarios that could deadlock run in a process of their own
(lifecycle_scenarios.py), killed with its process group after a generous
timeout: a hang fails the test instead of hanging pytest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

import flagstream
from conftest import STEP

USER42 = {"key": "user-42", "country": "US", "plan": "enterprise"}
SCENARIOS = Path(__file__).with_name("lifecycle_scenarios.py")


def scenario(name: str, tmp_path: Path, relay: Optional[Any] = None) -> Dict[str, Any]:
    """Runs scenario `name` in a new process group; its JSON report. A
    scenario still running after 2 × STEP is killed (with any child it
    forked) and the test fails."""
    env = {**os.environ, "FLAGSTREAM_TEST_DIR": str(tmp_path)}
    if relay is not None:
        env.update(FLAGSTREAM_TEST_RELAY=relay.url, FLAGSTREAM_TEST_SDK_KEY=relay.sdk_key)
    else:
        env.update(FLAGSTREAM_TEST_SDK_KEY="sdk-none")
    p = subprocess.Popen([sys.executable, str(SCENARIOS), name], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=2 * STEP)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"{name} hung (killed after {2 * STEP} s)\nstdout:\n{out}\nstderr:\n{err}")
    assert p.returncode == 0, f"{name} exited {p.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    lines = out.strip().splitlines()
    assert lines, f"{name} printed no report\nstderr:\n{err}"
    return json.loads(lines[-1])


def test_close_while_another_close_is_stopping_the_client(relays, tmp_path) -> None:
    """The second close() returns at once (the client is closed already)
    while the first is still stopping the client without the GIL."""
    a = relays("a")
    report = scenario("concurrent_close_held", tmp_path, a)
    assert report == {"second_returned": True, "closed": True, "first_returned": True, "theme": "dark"}, report


def test_threads_closing_clients_at_once(relays, tmp_path) -> None:
    """Four threads released together close each of eight ready clients."""
    a = relays("a")
    report = scenario("concurrent_close_race", tmp_path, a)
    assert report == {"returned": 32, "closed": True}, report


def test_fork_during_close(relays, tmp_path) -> None:
    """A child forked while another thread is inside close() serves the
    last data, closes, and starts a client of its own."""
    a = relays("a")
    report = scenario("fork_during_close", tmp_path, a)
    assert report == {"child": {"theme": "dark", "status": "closed", "fresh": "dark"}, "child_exit": 0,
                      "parent_closed": True}, report


def test_collected_client_stops_without_the_gil_and_writes_its_cache(relays, tmp_path) -> None:
    a = relays("a")
    report = scenario("collected_client_stops_without_the_gil", tmp_path, a)
    assert report == {"held": True, "ran_meanwhile": True, "dropped": True, "source": "cache",
                      "same_revision": True}, report


def test_construction_waits_for_its_cache_without_the_gil(tmp_path) -> None:
    report = scenario("construction_releases_the_gil", tmp_path)
    assert report == {"ran_during_construction": True, "runner_done": True}, report


def test_forked_child_reads_the_parents_snapshot_not_its_client(relays, proxy) -> None:
    """Until the child's own sync has data, the child serves the parent's
    snapshot as a fixed one (stale), counting its fallbacks itself: it never
    calls the parent's Rust client, whose locks (usage, status) a parent
    thread may have held at the fork. The relay path is blackholed so that
    the child's sync cannot get data while it reports."""
    a = relays("a")
    p = proxy(a.grpc)
    c = flagstream.Client(endpoints=[p.url], sdk_key=a.sdk_key)
    try:
        assert c.wait_ready(STEP), c.status()
        p.blackhole()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report over the pipe, never return into pytest
            code = 1
            try:
                os.close(r)
                missing = c.bool_detail("no-such-flag", USER42, True)
                d = c.string_detail("theme", USER42, "light")
                report = {
                    "theme": d.value, "theme_stale": d.stale,
                    "missing": [missing.value, missing.error_kind, missing.stale],
                    "bool": c.bool("new-checkout", USER42, False),
                    "not_found": c.stats().default_not_found,
                    "state": c.status().state,
                }
                os.write(w, json.dumps(report).encode())
                code = 0
            except BaseException as e:  # reported, then the child exits
                os.write(w, json.dumps({"error": repr(e)}).encode())
            finally:
                os._exit(code)
        os.close(w)
        got: Dict[str, Any] = {}

        def read() -> None:
            with os.fdopen(r) as reader:
                got.update(json.loads(reader.read() or "{}"))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(STEP)
        if reader.is_alive():
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert not reader.is_alive(), "the child hung"
        assert os.waitstatus_to_exitcode(status) == 0, got
        assert got == {"theme": "dark", "theme_stale": True, "missing": [True, "FLAG_NOT_FOUND", True],
                       "bool": True, "not_found": 1, "state": "stale"}, got
    finally:
        c.close()
