"""The heartbeat sidecar: a small process that renews the leases its parent holds.

Started by :mod:`tether.runtime.heartbeat` (one per runner process), run as a script so
that it starts on the standard library alone: tether and a store driver are imported only
when a renewal is first due. It reads JSON lines on stdin::

    {"parent": PID, "lifeline": NAME}                            first line
    {"hold": RUN_ID, "token": T, "ttl": S, "at": EPOCH, "url": URL, "options": {...}}
    {"drop": RUN_ID, "token": T}

and renews each held lease every ``ttl / 3`` seconds with a fenced write
(``CheckpointStore.renew_lease``) while its parent is alive and not stopped: a parent in
state ``T`` (SIGSTOP, a debugger) is not renewed, so its lease runs out and another runner
may take the run over. A renewal refused with LeaseLost drops that lease. The sidecar exits
when its parent does (stdin closes, or the pid is gone).

It is also the dead man's switch of its parent's shell commands (``tools/_lifeline.py``):
a lease not renewed until shortly before it runs out (its parent stopped, or the store out
of reach) may pass to another runner, which runs the step again; a stopped process cannot
stop its own command, so a thread here (:class:`Switch`, apart from renewals, which can
block on a store) fences the parent. The fence file names the leases that lapsed, or were
taken over, so the parent refuses the new commands of those runs. While a lease is lapsed,
the parent's command watchers (its children named ``NAME``) kill every command it runs,
and each one it starts. The kill covers all the parent's commands, because a stall stops
every run of the process at once and a watcher does not know a command's run. A lease
renewed again leaves the file. One taken over stays there until the parent drops it (its
next write is refused: it stops).
"""

from __future__ import annotations

import json
import os
import signal
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

FENCE, UNFENCE = signal.SIGUSR1, signal.SIGUSR2
"""The command watcher's signals (``tools/_lifeline.py``): kill them all and each new one; stop."""


def margin(ttl: float) -> float:
    """How long before a lease unrenewed runs out its commands are killed: a new holder can
    take the run over once it has, and its first command must not meet the old one."""
    return min(2 * POLL, ttl / 5)


def parent_state(pid: int) -> str | None:
    """The parent's scheduler state (R, S, D, T, t, Z…) from ``/proc``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]


def watchers(parent: int, name: str) -> list[int]:
    """The parent's command watchers: its children whose last argument is ``name``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            if int(stat.rpartition(b")")[2].split()[1]) != parent:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read().endswith(b"\0" + name.encode() + b"\0"):
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


class Switch:
    """The dead man's switch (see the module docstring): a thread that fences the parent's
    commands while any lease it holds has lapsed (not renewed until ``margin`` before it
    runs out) or was taken over, and lifts the fence once none has."""

    def __init__(self, first: dict[str, Any], held: dict[str, dict[str, Any]], lock: threading.Lock) -> None:
        self.parent, self.held, self.lock = int(first["parent"]), held, lock
        self.name: str | None = first.get("lifeline")
        self.file: str | None = first.get("fence_file")
        self.fenced = False
        """Whether the watcher is fenced (while a lease lapsed)."""
        self.keys: list[str] = []
        """The leases the fence file names."""
        self.flag([])  # left by a sidecar killed while fenced: its successor starts unfenced
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.done.wait(POLL):
            self.check(time.time())

    def check(self, now: float) -> None:
        with self.lock:
            lapsed = [
                h for h in self.held.values() if not h.get("lost") and now >= h["expires"] - margin(h["ttl"])
            ]
            lost = [h for h in self.held.values() if h.get("lost")]
        keys = sorted(str(h.get("key") or f"{h['token']}:{h['run']}") for h in lapsed + lost)
        if keys != self.keys:  # first: the parent refuses new commands of these runs
            if lapsed and not self.fenced:
                print(
                    f"tether heartbeat: the lease on run {lapsed[0]['run']} was not renewed in time: "
                    "killing this process's shell commands, and refusing new ones of its runs whose "
                    "lease lapsed, until each is renewed or released",
                    file=sys.stderr,
                    flush=True,
                )
            self.flag(keys)
            self.keys = keys
        if lapsed:  # sent again each tick: a watcher started since (or a signal reordered) is fenced too
            self.fenced = True
            self.signal(FENCE)
        elif self.fenced:  # renewed again, or taken over (those stay in the file until dropped)
            self.fenced = False
            self.signal(UNFENCE)

    def flag(self, keys: list[str]) -> None:
        """Write the parent's fence file (``Lifeline.fence_file``): the leases it is up
        for, one a line; none: no file."""
        if self.file is None:
            return
        try:
            if keys:
                with open(self.file + ".new", "w") as f:
                    f.write("".join(f"{k}\n" for k in keys))
                os.replace(self.file + ".new", self.file)  # a reader sees the old list or the new
            else:
                os.unlink(self.file)
        except OSError:
            pass

    def close(self) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2 * POLL)
        if self.keys:
            self.flag([])

    def signal(self, sig: int) -> None:
        if self.name is None:
            return
        for pid in watchers(self.parent, self.name):
            try:
                os.kill(pid, sig)
            except OSError:  # gone since
                pass


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

    def renew(self, hold: dict[str, Any], until: float) -> str:
        """Renew one lease: ``renewed``; ``released`` (by its holder, whose drop is on its
        way, or its run is gone); ``taken`` (another runner holds the run now)."""
        from tether.errors import LeaseLost

        store = self.stores.get(hold["url"])
        if store is None:
            from tether.stores.registry import create_store

            store = create_store(hold["url"], **hold.get("options", {}))
            self.stores[hold["url"]] = store
        try:
            self.loop.run_until_complete(store.renew_lease(hold["run"], hold["token"], until))
        except LeaseLost as exc:
            return "taken" if exc.current > exc.held else "released"
        return "renewed"

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
    lock = threading.Lock()
    switch = Switch(first, held, lock)
    switch.thread.start()
    renewer: Renewer | None = None
    stopped = False
    try:
        while True:
            now = time.time()
            wait = POLL if stopped else min([POLL, *(h["due"] - now for h in held.values())])
            if wait > 0:
                time.sleep(wait)
            for cmd in pipe.lines():
                with lock:
                    if "hold" in cmd:
                        ttl = float(cmd["ttl"])
                        since = min(float(cmd.get("at", now)), time.time())
                        due = since + ttl / 3
                        held[cmd["hold"]] = {
                            **cmd,
                            "run": cmd["hold"],
                            "ttl": ttl,
                            "due": due,
                            "expires": since + ttl,
                        }
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
                with lock:
                    if kept == "released":
                        held.pop(run_id, None)
                    elif kept == "taken":  # fenced until the parent drops it
                        hold["lost"], hold["due"] = True, float("inf")
                    else:
                        hold["due"], hold["expires"] = now + hold["ttl"] / 3, now + hold["ttl"]
    finally:
        switch.close()
        if renewer is not None:
            renewer.close()


if __name__ == "__main__":
    main()
