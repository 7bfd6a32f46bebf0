"""The heartbeat sidecar: a small process that renews the leases its parent holds.

Started by :mod:`tether.runtime.heartbeat` (one per runner process), run as a script so
that it starts on the standard library alone: tether and a store driver are imported only
when a renewal is first due. It reads JSON lines on stdin::

    {"parent": PID}                                              first line
    {"hold": RUN_ID, "token": T, "ttl": S, "at": EPOCH, "url": URL, "options": {...}}
    {"drop": RUN_ID, "token": T}

and renews each held lease every ``ttl / 3`` seconds with a fenced write
(``CheckpointStore.renew_lease``) while its parent is alive and not stopped: a parent in
state ``T`` (SIGSTOP, a debugger) is not renewed, so its lease runs out and another runner
may take the run over. A renewal refused with LeaseLost drops that lease. The sidecar exits
when its parent does (stdin closes, or the pid is gone).

The sidecar reads its pipe once per tick (:data:`POLL`), not on every line: most runs of a
busy worker hold and drop their lease within a tick, and waking this process twice per run
cost about a tenth of a short run's CPU (see benchmarks/README.md, ``bench_workers``). A
hold carries the time it was sent (``at``), and its first renewal is due a third of a lease
after that, so reading it up to a tick late moves no renewal. A drop read late is harmless:
renewing a lease its holder released is refused (LeaseLost) and drops it here too.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

if (
    __name__ == "__main__"
    and sys.path
    and os.path.dirname(os.path.abspath(__file__)) == os.path.abspath(sys.path[0])
):
    sys.path.pop(0)  # run as a script: its own directory must not shadow top-level modules

POLL = 0.2
"""Seconds between reads of the pipe and checks of the parent when no renewal is due sooner."""


def parent_state(pid: int) -> str | None:
    """The parent's scheduler state (R, S, D, T, t, Z…) from ``/proc``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]


class Pipe:
    """The parent's lines on stdin, read without blocking: whatever arrived since the last
    read, all at once."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.closed = False

    def first(self) -> dict[str, Any] | None:
        """The first line (blocking: nothing is due before the parent is known)."""
        while b"\n" not in self.buf:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        os.set_blocking(self.fd, False)
        return _decode(line)

    def lines(self) -> list[dict[str, Any]]:
        """Every complete line that arrived; sets ``closed`` once the parent closed the pipe."""
        while not self.closed:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                self.closed = True
                break
            self.buf += chunk
        *complete, self.buf = self.buf.split(b"\n")
        return [cmd for cmd in map(_decode, complete) if cmd is not None]


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        cmd = json.loads(line)
    except ValueError:
        return None
    return cmd if isinstance(cmd, dict) else None


class Renewer:
    """The stores this sidecar renews leases on, opened when first needed, one per URL."""

    def __init__(self) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        self.stores: dict[str, Any] = {}

    def renew(self, hold: dict[str, Any], until: float) -> bool:
        """Renew one lease; False when it was taken over (LeaseLost) or its run is gone."""
        from tether.errors import LeaseLost

        store = self.stores.get(hold["url"])
        if store is None:
            from tether.stores.registry import create_store

            store = create_store(hold["url"], **hold.get("options", {}))
            self.stores[hold["url"]] = store
        try:
            self.loop.run_until_complete(store.renew_lease(hold["run"], hold["token"], until))
        except LeaseLost:
            return False
        return True

    def close(self) -> None:
        for store in self.stores.values():
            try:
                self.loop.run_until_complete(store.aclose())
            except Exception:  # exiting: nothing left to do about it
                pass
        self.loop.close()


def _preload() -> None:
    try:
        import tether.stores.registry  # noqa: F401
    except Exception:  # reported by the renewal that needs it
        pass


def main() -> None:
    pipe = Pipe(sys.stdin.fileno())
    first = pipe.first()
    if first is None:
        return
    parent = int(first["parent"])
    # the first renewal is due a third of a lease from now: import the stores meanwhile
    threading.Thread(target=_preload, daemon=True).start()
    held: dict[str, dict[str, Any]] = {}
    renewer: Renewer | None = None
    stopped = False
    try:
        while True:
            now = time.time()
            wait = POLL if stopped else min([POLL, *(h["due"] - now for h in held.values())])
            if wait > 0:
                time.sleep(wait)
            for cmd in pipe.lines():
                if "hold" in cmd:
                    ttl = float(cmd["ttl"])
                    since = min(float(cmd.get("at", now)), time.time())
                    held[cmd["hold"]] = {**cmd, "run": cmd["hold"], "ttl": ttl, "due": since + ttl / 3}
                elif "drop" in cmd and held.get(cmd["drop"], {}).get("token") == cmd.get("token"):
                    held.pop(cmd["drop"], None)
            if pipe.closed:
                return  # the parent closed the pipe: it exited
            state = parent_state(parent)
            if state is None or state in ("Z", "X"):
                return
            stopped = state in ("T", "t")
            if stopped:
                continue  # let its leases run out (and look again a tick later)
            now = time.time()
            for run_id, hold in list(held.items()):
                if hold["due"] > now:
                    continue
                if renewer is None:
                    renewer = Renewer()
                try:
                    kept = renewer.renew(hold, now + hold["ttl"])
                except Exception as exc:  # the store is down: try again soon, the lease may hold
                    print(f"tether heartbeat: renewing {run_id} failed: {exc!r}", file=sys.stderr, flush=True)
                    hold["due"] = now + min(1.0, hold["ttl"] / 6)
                    continue
                if not kept:
                    held.pop(run_id, None)
                    continue
                hold["due"] = now + hold["ttl"] / 3
    finally:
        if renewer is not None:
            renewer.close()


if __name__ == "__main__":
    main()
