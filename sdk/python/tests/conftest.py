"""Fixtures: real relay processes (the `relay` binary the tests crate
builds), `flagctl` for writes, and a TCP proxy that can blackhole.

FLAGSTREAM_RELAY_BIN and FLAGSTREAM_FLAGCTL_BIN name the binaries
(`tests/tests/bindings/python_sdk.rs` sets them); without them the relay tests fail.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[3]
EVAL_DIR = REPO / "tests" / "data" / "eval"
# How long any wait on an event may take before a test fails (not a bound
# asserted on timing: generous on a loaded 2-core machine).
STEP = 60.0


def _binary(var: str) -> str:
    path = os.environ.get(var)
    if not path or not os.path.exists(path):
        pytest.fail(f"{var} must name the built binary (cargo test -p flagstream-tests --test bindings python_sdk sets it)")
    return path


class Relay:
    """One relay process on 127.0.0.1 with the demo environment."""

    def __init__(self, dir: Path, listen: str = "127.0.0.1:0", extra: Optional[List[str]] = None) -> None:
        self.dir = dir
        self.data = dir / "data"
        dir.mkdir(parents=True, exist_ok=True)
        self.log_path = dir / "relay.log"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [_binary("FLAGSTREAM_RELAY_BIN"), "serve", "--metrics-listen", "127.0.0.1:0", "--listen", listen,
             "--data-dir", str(self.data), "--demo", "true", *(extra or [])],
            stdout=subprocess.PIPE, stderr=log, env={**os.environ, "RUST_LOG": "info"},
        )
        log.close()
        assert self.proc.stdout is not None
        line = b""
        for line in self.proc.stdout:
            if line.startswith(b"flagstream-relay listening"):
                break
        else:
            raise AssertionError(f"relay did not start: {self.log_path.read_text(errors='replace')}")
        fields = dict(w.split("=", 1) for w in line.decode().split() if "=" in w)
        self.grpc = fields["grpc"]
        self.admin = fields["admin"]
        # Keep draining stdout so the relay never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    @property
    def url(self) -> str:
        return f"http://{self.grpc}"

    @property
    def sdk_key(self) -> str:
        return (self.data / "demo-sdk-key").read_text().strip()

    @property
    def admin_token(self) -> str:
        return (self.data / "admin-token").read_text().strip()

    def flagctl(self, *args: str) -> str:
        out = subprocess.run(
            [_binary("FLAGSTREAM_FLAGCTL_BIN"), "--relay", self.url, "--token", self.admin_token,
             "--config", "/nonexistent/flagctl.toml", *args],
            capture_output=True, text=True, env={**os.environ, "FLAGSTREAM_ENV": "demo"}, timeout=STEP,
        )
        assert out.returncode == 0, f"flagctl {args}: {out.stderr}"
        return out.stdout

    def stop(self) -> None:
        """SIGTERM and wait (a clean shutdown)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=STEP)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STEP)


@pytest.fixture
def relays(tmp_path: Path):
    """Starts relays on demand; all are killed at the end."""
    started: List[Relay] = []

    def start(name: str = "a", listen: str = "127.0.0.1:0", copy_from: Optional[Relay] = None) -> Relay:
        d = tmp_path / name
        if copy_from is not None and not (d / "data").exists():
            shutil.copytree(copy_from.data, d / "data")
        r = Relay(d, listen)
        started.append(r)
        return r

    yield start
    for r in started:
        r.kill()


class Proxy:
    """A TCP proxy to `target` that can stop forwarding without closing
    anything (a blackhole: no FIN, no RST), like a dead network path."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.blackholed = threading.Event()
        self.closed = threading.Event()
        self.sockets: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    def blackhole(self) -> None:
        """From now on nothing is forwarded either way, and new
        connections are accepted but never forwarded."""
        self.blackholed.set()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(c)
            if self.blackholed.is_set():
                continue  # held open, never answered
            try:
                u = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            self.sockets.append(u)
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers: Dict[socket.socket, socket.socket] = {a: b, b: a}
        while not self.closed.is_set():
            r, _, _ = select.select([a, b], [], [], 0.2)
            if self.blackholed.is_set():
                return  # stop reading: the sockets stay open, silent
            for s in r:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    for x in (a, b):
                        x.close()
                    return
                peers[s].sendall(data)

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
        for s in self.sockets:
            s.close()


@pytest.fixture
def proxy():
    made: List[Proxy] = []

    def start(target: str) -> Proxy:
        p = Proxy(target)
        made.append(p)
        return p

    yield start
    for p in made:
        p.close()
