"""The Python client against real relay processes: first data, a change
arriving, failover by delta, the blackhole stall, the cache with every
relay down, fork, usage summaries reaching the relay."""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import flagstream
from conftest import STEP

USER42 = {"key": "user-42", "country": "US", "plan": "enterprise"}


def flag_event(client: flagstream.Client, key: str) -> threading.Event:
    """Set when an applied revision changes `key`."""
    ev = threading.Event()
    client.on_flag_change(key, lambda k, rev: ev.set())
    return ev


def test_first_data_and_a_change(relays, caplog) -> None:
    a = relays("a")
    with flagstream.Client(endpoints=[a.url], sdk_key=a.sdk_key) as c:
        assert c.wait_ready(STEP), c.status()
        st = c.status()
        assert (st.state, st.source) == ("ready", "stream"), st
        assert c.string("theme", USER42, "light") == "dark"
        assert c.bool("new-checkout", USER42, False) is True
        d = c.bool_detail("new-checkout", USER42, False)
        assert (d.reason, d.rule_id, d.rule_index, d.variation) == ("RULE_MATCH", "us-enterprise", 0, 0), d
        assert d.revision == st.revision and not d.stale
        # A listener that raises is logged; the others still run.
        revisions = []
        got = threading.Event()
        c.on_change(lambda ch: 1 / 0)

        def record(ch: flagstream.Change) -> None:
            revisions.append(ch)
            got.set()

        c.on_change(record)
        changed = flag_event(c, "py-flag")
        assert c.bool("py-flag", USER42, False) is False
        a.flagctl("flag", "create", "py-flag", "--on", "--yes")
        assert changed.wait(STEP), "the change did not arrive"
        assert got.wait(STEP)
        assert c.bool("py-flag", USER42, False) is True
        assert any("py-flag" in (ch.flags or ()) for ch in revisions), revisions
        s = c.stats()
        assert s.snapshots_applied == 1 and s.deltas_applied >= 1, s
        assert s.default_not_found >= 1, "the evaluation before the flag existed was counted"
    assert any("a change listener raised" in r.getMessage() for r in caplog.records)
    assert c.closed and c.status().state == "closed"
    assert c.bool("py-flag", USER42, False) is True, "a closed client serves its last data"


def test_failover_by_delta(relays) -> None:
    a = relays("a")
    a.stop()
    b = relays("b", copy_from=a)  # the same store: the same epoch
    a = relays("a")
    with flagstream.Client(endpoints=[a.url, b.url], sdk_key=a.sdk_key, keep_endpoint_order=True,
                           backoff_base=0.1) as c:
        assert c.wait_ready(STEP)
        assert c.stats().snapshots_applied == 1
        changed = flag_event(c, "after-failover")
        a.kill()
        b.flagctl("flag", "create", "after-failover", "--on", "--yes")
        assert changed.wait(STEP), c.status()
        assert c.bool("after-failover", USER42, False) is True
        s = c.stats()
        assert s.snapshots_applied == 1, f"resumed with a delta, not a snapshot: {s}"
        assert s.endpoint_switches >= 1 and s.deltas_applied >= 1, s


def test_blackhole_stall_recovered_with_default_settings(relays, proxy) -> None:
    a = relays("a")
    a.stop()
    b = relays("b", copy_from=a)
    a = relays("a")
    p = proxy(a.grpc)
    # Default settings except the order (the stalled path first).
    with flagstream.Client(endpoints=[p.url, b.url], sdk_key=a.sdk_key, keep_endpoint_order=True) as c:
        assert c.wait_ready(STEP)
        assert c.stats().snapshots_applied == 1
        changed = flag_event(c, "after-stall")
        p.blackhole()
        b.flagctl("flag", "create", "after-stall", "--on", "--yes")
        # Bounded as the Rust stall tests are (20 s): with default settings
        # the stall is found in ~5 s (keepalive 3 s + 2 s), then the
        # change arrives from the other relay.
        assert changed.wait(20.0), c.status()
        assert c.bool("after-stall", USER42, False) is True
        assert c.string("theme", USER42, "light") == "dark", "never the default for a known flag"
        s = c.stats()
        assert s.stalls == 1, f"detected as one stall: {s}"
        assert s.endpoint_switches == 1, s
        assert s.snapshots_applied == 1, f"resumed with a delta: {s}"


def test_cache_across_a_restart_with_every_relay_down(relays, tmp_path) -> None:
    a = relays("a")
    cache = tmp_path / "cache"
    with flagstream.Client(endpoints=[a.url], sdk_key=a.sdk_key, cache_dir=str(cache)) as c:
        assert c.wait_ready(STEP)
        changed = flag_event(c, "cached-flag")
        a.flagctl("flag", "create", "cached-flag", "--on", "--yes")
        assert changed.wait(STEP)
    # close() wrote the newest revision; now no relay at all.
    a.kill()
    with flagstream.Client(endpoints=[a.url], sdk_key=a.sdk_key, cache_dir=str(cache)) as c:
        assert c.wait_ready(STEP)
        st = c.status()
        assert (st.state, st.source) == ("stale", "cache"), st
        assert c.bool("cached-flag", USER42, False) is True
        assert c.string("theme", USER42, "light") == "dark"
        assert c.stats().cache_errors == 0


def test_fork_restarts_the_sync_in_the_child(relays) -> None:
    a = relays("a")
    c = flagstream.Client(endpoints=[a.url], sdk_key=a.sdk_key, backoff_base=0.1)
    # A second client: each restarts once in the child, whichever notices
    # the fork first.
    c2 = flagstream.Client(endpoints=[a.url], sdk_key=a.sdk_key, backoff_base=0.1)
    try:
        assert c.wait_ready(STEP) and c2.wait_ready(STEP)
        forks = flagstream._native._forks()
        to_parent_r, to_parent_w = os.pipe()
        to_child_r, to_child_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report over the pipe, never return into pytest
            code = 1
            try:
                os.close(to_parent_r)
                os.close(to_child_w)
                report = {"forks_seen": flagstream._native._forks() > forks,
                          "theme_at_once": c.string("theme", USER42, "light")}
                changed = flag_event(c, "after-fork")
                changed2 = flag_event(c2, "after-fork")
                os.write(to_parent_w, b"ready\n")
                os.read(to_child_r, 1)  # the parent wrote the flag
                report["changed"] = changed.wait(STEP)
                report["after_fork"] = c.bool("after-fork", USER42, False)
                report["status"] = c.status().state
                report["connects"] = c.stats().connects
                report["changed2"] = changed2.wait(STEP)
                report["connects2"] = c2.stats().connects
                report["status2"] = c2.status().state
                os.write(to_parent_w, (json.dumps(report) + "\n").encode())
                code = 0
            except BaseException as e:  # reported, then the child exits
                os.write(to_parent_w, (json.dumps({"error": repr(e)}) + "\n").encode())
            finally:
                os._exit(code)
        os.close(to_parent_w)
        os.close(to_child_r)
        reader = os.fdopen(to_parent_r)
        parent_changed = flag_event(c, "after-fork")
        assert reader.readline() == "ready\n"
        a.flagctl("flag", "create", "after-fork", "--on", "--yes")
        os.write(to_child_w, b"x")
        report = json.loads(reader.readline())
        _, status = os.waitpid(pid, 0)
        assert report == {"forks_seen": True, "theme_at_once": "dark", "changed": True, "after_fork": True,
                          "status": "ready", "connects": 1, "changed2": True, "connects2": 1,
                          "status2": "ready"}, report
        assert os.WEXITSTATUS(status) == 0
        # The parent's client kept working too.
        assert parent_changed.wait(STEP)
        assert c.bool("after-fork", USER42, False) is True
    finally:
        c.close()
        c2.close()


def test_offline_file(tmp_path) -> None:
    f = tmp_path / "flags.yaml"
    f.write_text("flags:\n  - {key: f, type: bool, variations: [true, false], on: true, off_variation: 1,"
                 " fallthrough: {variation: 0}}\n")
    c = flagstream.Client.offline_file(f)
    assert c.wait_ready(0) and c.bool("f", {"key": "u"}, False) is True
    assert c.status().source == "file"


def test_bad_arguments_raise() -> None:
    import pytest
    with pytest.raises(ValueError, match="SDK key"):
        flagstream.Client(endpoints=["http://127.0.0.1:1"])
    with pytest.raises(TypeError, match="unknown option"):
        flagstream.Client(endpoints=["http://127.0.0.1:1"], sdk_key="k", bogus=1)
    c = flagstream.Client.test_data([])
    with pytest.raises(TypeError):
        c.bool("f", "not a context", False)  # type: ignore[arg-type]
    logging.getLogger("flagstream").debug("ok")


def _usage(relay, key: str) -> dict:
    """`flagctl flag usage KEY -o json` at `relay`: the flag's entry."""
    return json.loads(relay.flagctl("flag", "usage", key, "-o", "json"))["flags"][0]


def _wait_usage(relay, key: str, done) -> dict:
    """Polls `flag usage KEY` until `done(entry)`: usage has no change
    notification to wait on; STEP bounds the wait."""
    deadline = time.monotonic() + STEP
    while True:
        f = _usage(relay, key)
        if done(f):
            return f
        assert time.monotonic() < deadline, f"{key}: never arrived at the relay: {f}"
        time.sleep(0.1)  # poll interval, bounded by the deadline above


def test_usage_reaches_the_relay(relays) -> None:
    """Evaluations through the Python client are counted and summarised to
    the relay: `flag usage` shows them, the caller's wrong default (with the
    mismatch warning) and a missing flag's fallbacks."""
    a = relays("a")
    a.flagctl("flag", "create", "py-kill", "--on", "--yes")
    with flagstream.Client(endpoints=[a.url], sdk_key=a.sdk_key, usage_interval=0.2) as c:
        assert c.wait_ready(STEP), c.status()
        for i in range(7):
            assert c.bool("py-kill", {"key": f"u{i}"}, False) is True
        for _ in range(3):
            assert c.bool("py-gone", USER42, True) is True
        f = _wait_usage(a, "py-kill", lambda f: sum(e["evaluations"] for e in f["day"]["evaluations"]) >= 7)
        assert sum(e["evaluations"] for e in f["day"]["evaluations"]) == 7, f
        assert f["sdks"] == 1 and f["default_mismatch"] is True, f
        assert [d["value"] for d in f["defaults"]] == [False], f
        assert "callers pass default false but the flag serves true" in f["warnings"][0], f
        gone = _wait_usage(a, "py-gone", lambda f: f["day"]["fallbacks"]["missing"] >= 3)
        assert gone["day"]["fallbacks"]["missing"] == 3 and gone["exists"] is False, gone


def test_close_sends_the_usage_counted_since_the_last_summary(relays) -> None:
    """close() sends what was counted since the last summary (no regular
    summary is due for an hour; the first may go a second after the first
    evaluations) and returns once the relay confirmed it read it: the relay
    has the counts when close() returns, no polling."""
    a = relays("a")
    a.flagctl("flag", "create", "py-short-lived", "--on", "--yes")
    c = flagstream.Client(endpoints=[a.url], sdk_key=a.sdk_key, usage_interval=3600)
    assert c.wait_ready(STEP), c.status()
    for i in range(5):
        assert c.bool("py-short-lived", {"key": f"u{i}"}, False) is True
    assert c.close() is True, "the relay confirmed the final summary"
    assert c.close() is False, "a second close has nothing to send"
    f = _usage(a, "py-short-lived")
    assert sum(e["evaluations"] for e in f["day"]["evaluations"]) == 5, f
