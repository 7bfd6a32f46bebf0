"""Heartbeats: a runner's leases stay alive while its steps run, however long they take.

A step longer than the lease is normal (a deploy, a test suite, a model call that streams
for minutes), and the step may block the runner's event loop (``time.sleep`` in an async
step) or hold the GIL in C code, where no thread of the runner's process can run. So the
renewals come from outside the process: a small sidecar process per runner process
(``_heartbeat_sidecar.py``, standard library only until a renewal is due) renews every
lease its parent holds, every third of the lease, with a fenced write
(:meth:`~tether.stores.base.CheckpointStore.renew_lease`), and only while the parent is
alive and not stopped: a SIGSTOPped holder's lease runs out, so another runner can take
the run over, and the stale holder's writes are then refused by its old token. The same
sidecar stops the shell commands of a holder whose lease runs out unrenewed (it cannot
stop them itself while stopped): it fences them through the process's command watcher
(``tools/_lifeline.py``), so no copy of a step's command runs on once another runner may
run the step again.

A store that another process cannot open (an in-memory store, one built without a URL)
is renewed by a task on the runner's event loop instead, which a blocked loop stops.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Protocol

from tether.errors import LeaseLost
from tether.stores.base import CheckpointStore
from tether.tools._lifeline import LEASE, LEASE_TTL, WATCHER_NAME, lifeline

__all__ = ["Beat", "start_heartbeat"]

logger = logging.getLogger(__name__)

SIDECAR = Path(__file__).with_name("_heartbeat_sidecar.py")
PIPE_BYTES = 1 << 20
"""The pipe to the sidecar holds this much: it reads once per tick (a fifth of a second), and
a full pipe would make a lease's take wait for that tick."""


class Beat(Protocol):
    """One lease being renewed; ``stop()`` ends its renewals (idempotent)."""

    def stop(self) -> None: ...


def start_heartbeat(store: CheckpointStore, run_id: str, token: int, ttl: float) -> Beat:
    """Renew the lease ``token`` on ``run_id`` every ``ttl / 3`` seconds until stopped or
    taken over: from the process's sidecar when the store can be opened there, else from
    a task on this event loop."""
    LEASE.set(lease_key(run_id, token))  # the run's commands are refused while a fence is up for it
    LEASE_TTL.set(ttl)  # and its remote commands die on hosts that stop hearing from it this long
    opened = store.opened_from()
    if opened is not None and sys.platform.startswith("linux"):
        beat = _sidecar().hold(run_id, token, ttl, *opened)
        if beat is not None:
            return beat
    return _TaskBeat(store, run_id, token, ttl)


def lease_key(run_id: str, token: int) -> str:
    """How a fence names a lease (``tools/_lifeline.py``, ``LEASE``)."""
    return f"{token}:{run_id}"


class _Sidecar:
    """This process's sidecar (started at its first lease, restarted if it died)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _pipe(self) -> IO[bytes]:
        proc = self._proc
        if proc is None or proc.poll() is not None or proc.stdin is None:
            proc = self._proc = subprocess.Popen(
                [sys.executable, str(SIDECAR)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal is the runner's to handle
            )
            assert proc.stdin is not None
            with contextlib.suppress(OSError, AttributeError):  # room for a tick of holds and drops
                fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            first = {"parent": os.getpid(), "lifeline": WATCHER_NAME, "fence_file": lifeline.fence_file}
            proc.stdin.write(json.dumps(first).encode() + b"\n")
        assert proc.stdin is not None
        return proc.stdin

    def send(self, message: dict[str, Any]) -> bool:
        line = json.dumps(message).encode() + b"\n"
        with self._lock:
            for _ in range(2):  # a sidecar that died is started again once
                try:
                    pipe = self._pipe()
                    pipe.write(line)
                    pipe.flush()
                    return True
                except (OSError, ValueError):
                    self._proc = None
        return False

    def close(self) -> None:
        """At exit: close the pipe (the sidecar exits on it) and reap the process."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):  # a fence the killed sidecar could not lift
            os.unlink(lifeline.fence_file)

    def hold(self, run_id: str, token: int, ttl: float, url: str, options: dict[str, Any]) -> Beat | None:
        hold = {
            "hold": run_id,
            "token": token,
            "key": lease_key(run_id, token),
            "ttl": ttl,
            "at": time.time(),
            "url": url,
            "options": options,
        }
        if not self.send(hold):
            logger.warning("heartbeat sidecar could not start; renewing %s from the event loop", run_id)
            return None
        return _SidecarBeat(self, run_id, token)


class _SidecarBeat:
    def __init__(self, sidecar: _Sidecar, run_id: str, token: int) -> None:
        self._sidecar = sidecar
        self._run_id = run_id
        self._token = token
        self._stopped = False

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._sidecar.send({"drop": self._run_id, "token": self._token})


_SIDECARS: dict[int, _Sidecar] = {}


def _sidecar() -> _Sidecar:
    """The sidecar of this process (a forked child gets its own)."""
    pid = os.getpid()
    sidecar = _SIDECARS.get(pid)
    if sidecar is None:
        sidecar = _SIDECARS[pid] = _Sidecar()
        atexit.register(sidecar.close)
    return sidecar


class _TaskBeat:
    """Renewals from a task on the runner's event loop (a store no other process can open)."""

    def __init__(self, store: CheckpointStore, run_id: str, token: int, ttl: float) -> None:
        self._task = asyncio.get_running_loop().create_task(self._renew(store, run_id, token, ttl))

    @staticmethod
    async def _renew(store: CheckpointStore, run_id: str, token: int, ttl: float) -> None:
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                await store.renew_lease(run_id, token, time.time() + ttl)
            except LeaseLost:
                return
            except Exception as exc:  # the store is down: the next beat tries again
                logger.warning("run %s: lease renewal failed: %r", run_id, exc, extra={"run_id": run_id})

    def stop(self) -> None:
        self._task.cancel()
