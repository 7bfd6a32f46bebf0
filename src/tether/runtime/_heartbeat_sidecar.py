"""The heartbeat sidecar: a small process that renews the leases its parent holds.

Started by :mod:`tether.runtime.heartbeat` (one per runner process), run as a script so
that it starts on the standard library alone: tether and a store driver are imported only
when a renewal is first due. It reads JSON lines on stdin::

    {"parent": PID}                                              first line
    {"hold": RUN_ID, "token": T, "ttl": S, "url": URL, "options": {...}}
    {"drop": RUN_ID, "token": T}

and renews each held lease every ``ttl / 3`` seconds with a fenced write
(``CheckpointStore.renew_lease``) while its parent is alive and not stopped: a parent in
state ``T`` (SIGSTOP, a debugger) is not renewed, so its lease runs out and another runner
may take the run over. A renewal refused with LeaseLost drops that lease. The sidecar exits
when its parent does (stdin closes, or the pid is gone).
"""

from __future__ import annotations

import json
import os
import queue
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
"""Seconds between checks of the parent when no renewal is due sooner."""


def parent_state(pid: int) -> str | None:
    """The parent's scheduler state (R, S, D, T, t, Z…) from ``/proc``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]


def _read(lines: queue.Queue[dict[str, Any] | None]) -> None:
    for line in sys.stdin:
        try:
            lines.put(json.loads(line))
        except ValueError:
            continue
    lines.put(None)


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
    lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_read, args=(lines,), daemon=True).start()
    first = lines.get()
    if first is None:
        return
    parent = int(first["parent"])
    # the first renewal is due a third of a lease from now: import the stores meanwhile
    threading.Thread(target=_preload, daemon=True).start()
    held: dict[str, dict[str, Any]] = {}
    renewer: Renewer | None = None
    try:
        while True:
            now = time.time()
            wait = min([POLL, *(h["due"] - now for h in held.values())])
            try:
                cmd = lines.get(timeout=max(0.0, wait))
            except queue.Empty:
                cmd = {}
            if cmd is None:
                return  # the parent closed the pipe: it exited
            if "hold" in cmd:
                ttl = float(cmd["ttl"])
                held[cmd["hold"]] = {**cmd, "run": cmd["hold"], "ttl": ttl, "due": time.time() + ttl / 3}
            elif "drop" in cmd and held.get(cmd["drop"], {}).get("token") == cmd.get("token"):
                held.pop(cmd["drop"], None)
            state = parent_state(parent)
            if state is None or state in ("Z", "X"):
                return
            if state in ("T", "t"):
                continue  # stopped: let its leases run out
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
