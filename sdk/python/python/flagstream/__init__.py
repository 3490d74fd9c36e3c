"""flagstream for Python: the Rust streaming client, one import away.

``flagstream.Client`` runs the whole Rust SDK (the relay stream with delta
resume, stall detection, failover, checksums and the last-known-good cache)
on threads this package owns. An evaluation reads process memory under the
GIL: no I/O, no lock, no exception for a missing or mistyped flag (the
caller's default comes back with an ``ERROR`` reason, counted in
``stats()``).

    import flagstream

    with flagstream.Client(endpoints=["http://127.0.0.1:7070"], sdk_key=key) as client:
        client.wait_ready(2.0)
        on = client.bool("new-checkout", {"key": "user-42", "country": "US"}, False)

Threads: everything that waits (construction, which may wait for and read
the cache, ``wait_ready``, ``close()``, the listener thread's wait, and the
stop of a client garbage collected without ``close()``) releases the GIL,
and ``close()`` may be called from several threads at once.

Fork safety: in a child of ``os.fork()`` (gunicorn, multiprocessing) a
client restarts its background sync on first use (or at once, through the
package's ``os.register_at_fork`` hook) and serves the parent's flags,
marked stale, until the new sync has data. The child runs without the
cache (the parent keeps it). A fork while another thread is closing a
client is safe: the child sees the client closed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _native
from ._native import Context, EvaluationDetail

__all__ = [
    "Client",
    "Context",
    "EvaluationDetail",
    "Status",
    "Stats",
    "Attempt",
    "Change",
]

__version__ = _native.__version__

log = logging.getLogger("flagstream")

ContextLike = Union[Mapping[str, Any], Context]


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One failed attempt to reach a relay."""

    endpoint: str
    error: str
    retry_in: float
    """Seconds until the next attempt."""


@dataclasses.dataclass(frozen=True)
class Status:
    """Where the served flags come from and whether they are current.

    ``state`` is ``initializing`` (no data yet; ``attempts`` says which relays
    failed and why), ``ready``, ``stale`` (serving data that may be out of
    date; ``reason`` says why), ``failed`` or ``closed``. ``source`` is
    ``stream``, ``cache``, ``file`` or ``test``.
    """

    state: str
    source: Optional[str] = None
    revision: Optional[int] = None
    since: Optional[float] = None
    """Unix seconds since when this state holds."""
    reason: Optional[str] = None
    attempts: Sequence[Attempt] = ()

    @property
    def has_data(self) -> bool:
        """Whether flags are served (ready or stale)."""
        return self.state in ("ready", "stale")

    @property
    def is_stale(self) -> bool:
        """Whether the served data is marked stale."""
        return self.state == "stale"


@dataclasses.dataclass(frozen=True)
class Stats:
    """The client's counters (see the Rust ``flagstream::Stats``)."""

    default_not_found: int
    default_not_ready: int
    default_wrong_type: int
    default_malformed: int
    connects: int
    reconnects: int
    endpoint_switches: int
    stalls: int
    resyncs: int
    checksum_mismatches: int
    diverged_heads: int
    retry_hints: int
    snapshots_applied: int
    deltas_applied: int
    cache_writes: int
    cache_errors: int
    stale_ms: int


@dataclasses.dataclass(frozen=True)
class Change:
    """One applied revision. ``flags`` is None when the listener fell too
    far behind to know which flags changed: re-read what you need."""

    revision: int
    flags: Optional[frozenset]


RevisionListener = Callable[[Change], None]
FlagListener = Callable[[str, int], None]

# Live clients, restarted at once in a forked child.
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    _native._after_fork_in_child()
    for c in list(_clients):
        try:
            c._after_fork()
        except Exception:  # a hook must not break the fork
            log.exception("flagstream: restarting a client after fork failed")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Client(_native.NativeClient):
    """A flagstream client.

    ``Client(endpoints=[...], sdk_key=..., cache_dir=None, **options)``
    returns at once: the Rust client streams from the relays in the
    background (the cache, if any, is served meanwhile). Options, all
    optional, as in the Rust ``Builder`` (durations in seconds):
    ``connect_timeout``, ``keepalive_interval``, ``keepalive_timeout``,
    ``tcp_user_timeout``, ``first_message_timeout``, ``heartbeat_default``,
    ``watchdog_misses``, ``backoff_base``, ``backoff_cap``, ``healthy_after``,
    ``stall_jitter``, ``stale_after``, ``cache_write_interval``,
    ``keep_endpoint_order`` (bool), ``tls_ca_pem``, ``tls_identity_pem``
    (cert, key), ``usage_reports`` (bool: count evaluations per flag and
    send usage summaries to the relay; default on when following a relay),
    ``usage_interval`` (how often a summary is sent; default 60).

    Evaluations (``bool``, ``string``, ``int``, ``float``, ``json`` and their
    ``*_detail`` forms) take a flag key, a context (a dict such as
    ``{"key": "user-42", "kind": "user", "country": "US"}``, a multi-kind
    ``{"kind": "multi", "user": {"key": ...}, "org": {"key": ...}}``, or a
    prebuilt :class:`Context`) and the default.
    """

    def __init__(self, endpoints: Any = None, sdk_key: Optional[str] = None,
                 cache_dir: Optional[str] = None, **options: Any) -> None:
        # The native __new__ took the arguments; here only listener state.
        self._lock = threading.Lock()
        self._revision_listeners: List[RevisionListener] = []
        self._flag_listeners: Dict[str, List[FlagListener]] = {}
        self._thread: Optional[threading.Thread] = None
        _clients.add(self)

    @classmethod
    def test_data(cls, flags: Union[Sequence[Mapping[str, Any]], Mapping[str, Any]],
                  segments: Sequence[Mapping[str, Any]] = (), *, validate: bool = True) -> "Client":
        """A client serving these flags (dicts in the flag file format of
        docs/EVALUATION.md), for unit tests of your code. ``flags`` may also
        be a whole flag set ``{"flags": [...], "segments": [...]}``.
        ``validate=False`` serves flags that fail validation as the engine
        compiles them (for tests of the evaluator itself)."""
        data = dict(flags) if isinstance(flags, Mapping) else {"flags": list(flags), "segments": list(segments)}
        return cls(_test_data=data, _validate=validate)

    @classmethod
    def offline_file(cls, path: Union[str, "os.PathLike[str]"]) -> "Client":
        """A client serving a YAML/JSON flag file (the format ``flagctl
        export`` writes) instead of a relay."""
        return cls(_offline_file=os.fspath(path))

    def status(self) -> Status:  # type: ignore[override]
        """The client's status."""
        raw = super().status()
        attempts = tuple(Attempt(**a) for a in raw.pop("attempts", ()))
        return Status(attempts=attempts, **raw)

    def stats(self) -> Stats:  # type: ignore[override]
        """A copy of the client's counters."""
        return Stats(**super().stats())

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> bool:
        """Closes the client: sends the usage counted since the last
        summary to the relay, waiting at most 2 s for it to confirm, then
        stops the background sync (writing the cache once more) and the
        listener thread. Evaluations afterwards serve the last data. Returns
        whether the relay confirmed the final summary (False without a
        relay stream, and when the client was closed already: a call while
        another thread is still closing it returns at once).

        A short-lived process should call it (or use ``with``) before it
        exits, so that the flags it evaluated are reported as used. A
        client dropped without ``close()`` stops the same way once it is
        garbage collected, sending its final summary without waiting."""
        confirmed = super().close()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
        return confirmed

    # Change listeners -------------------------------------------------

    def on_change(self, listener: RevisionListener) -> RevisionListener:
        """Calls ``listener(Change)`` for every applied revision, on the
        package's listener thread. Exceptions are logged, not propagated.
        Usable as a decorator; returns the listener."""
        with self._lock:
            self._revision_listeners.append(listener)
        self._ensure_thread()
        return listener

    def on_flag_change(self, key: str, listener: FlagListener) -> FlagListener:
        """Calls ``listener(key, revision)`` whenever an applied revision
        changes flag ``key`` (re-evaluate it in the listener)."""
        with self._lock:
            self._flag_listeners.setdefault(key, []).append(listener)
        self._ensure_thread()
        return listener

    def remove_listener(self, listener: Callable[..., None]) -> None:
        """Removes a listener added with ``on_change`` or ``on_flag_change``."""
        with self._lock:
            self._revision_listeners = [x for x in self._revision_listeners if x is not listener]
            for k in list(self._flag_listeners):
                self._flag_listeners[k] = [x for x in self._flag_listeners[k] if x is not listener]

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            if self.closed:
                return
            self._subscribe()
            t = threading.Thread(target=self._dispatch, name="flagstream-listeners", daemon=True)
            self._thread = t
            t.start()

    def _dispatch(self) -> None:
        while True:
            got = self._next_change(1.0)
            if got is False:
                return
            if got is None:
                continue
            revision, keys = got
            change = Change(revision, None if keys is None else frozenset(keys))
            with self._lock:
                revision_listeners = list(self._revision_listeners)
                flag_listeners = {k: list(v) for k, v in self._flag_listeners.items()}
            for listener in revision_listeners:
                try:
                    listener(change)
                except Exception:
                    log.exception("flagstream: a change listener raised")
            for key, listeners in flag_listeners.items():
                if change.flags is not None and key not in change.flags:
                    continue
                for listener in listeners:
                    try:
                        listener(key, revision)
                    except Exception:
                        log.exception("flagstream: a flag listener for %r raised", key)

    def _after_fork(self) -> None:
        # The lock may have been held by a parent thread at the fork.
        self._lock = threading.Lock()
        self._restart_after_fork()
        had_thread = self._thread is not None
        self._thread = None  # threads do not survive a fork
        if had_thread and not self.closed:
            self._ensure_thread()
