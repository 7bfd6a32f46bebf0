"""A runner in a child process whose one step runs a shell command through ``LocalSession``.

    python -m tests.tools._stall_flow URL RUN_ID start|resume|pair TTL KIND SECONDS WORK

The step starts ``echo $$ > WORK/<tag>.pg; sleep SECONDS; echo <tag> >> WORK/effects``
(``tag``: ``start`` or ``resume``), prints ``in:cmd`` once the command runs, and then:

* ``KIND`` ``wait``: awaits the command (the test stops this process meanwhile); then
  starts a second one, ``echo <tag> >> WORK/seconds``, and writes both results to
  ``WORK/<tag>.result``.
* ``KIND`` ``gil``: holds the GIL in C code (no thread of this process runs) until the
  command has ended, then writes its result.

With ``TETHER_STALL_SSH`` set to ``PORT KEY KNOWN_HOSTS``, the commands run through an
``SSHSession`` to that sshd on loopback instead (same files: the host is this machine).

At the end the process prints the run's status or ``LEASE_LOST`` (exit code 3). ``pair``
starts two runs in this process, ``RUN_ID`` (tag ``start``) and ``RUN_ID-b`` (tag ``b``,
whose second command is tried again while it is refused), and prints both outcomes.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import sys
import time

from tether.errors import LeaseLost, SessionError
from tether.runtime import Runner, Step, StepContext, Workflow
from tether.stores import create_store
from tether.tools import LocalSession, Session, SSHCredentials, SSHSession


def hold_gil_until(path: str, limit: float) -> None:
    """Burn the CPU inside C calls (``sum`` over a range holds the GIL throughout) until
    ``path`` exists or ``limit`` seconds passed; checks between calls of about 0.2 s."""
    began = time.perf_counter()
    sum(range(2_000_000))
    per = (time.perf_counter() - began) / 2_000_000
    while not os.path.exists(path) and time.perf_counter() - began < limit:
        sum(range(int(0.2 / per)))


async def renewed(store: object, run_id: str, timeout: float) -> None:
    """Wait for the sidecar's first renewal (its start-up on a loaded host takes a while)."""
    first = (await store.get_run(run_id)).lease_until  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    while (await store.get_run(run_id)).lease_until == first:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "no heartbeat"
        await asyncio.sleep(0.05)


def open_session(work: str) -> Session:
    ssh = os.environ.get("TETHER_STALL_SSH")
    if not ssh:
        return LocalSession(work, default_timeout=600)
    port, key, known = ssh.split()
    creds = SSHCredentials(
        host="127.0.0.1", port=int(port), username=getpass.getuser(), key_path=key, known_hosts=known
    )
    return SSHSession(creds, cwd=work, default_timeout=600)


def make_workflow(store: object, tag: str, kind: str, seconds: float, work: str) -> Workflow:
    async def step(sc: StepContext) -> dict:
        if kind == "gil":
            await renewed(store, sc.run_id, 30)
        session = open_session(work)
        command = f"echo $$ > {tag}.pg; sleep {seconds}; echo {tag} >> effects"
        task = asyncio.create_task(session.run(command))
        while not os.path.exists(os.path.join(work, f"{tag}.pg")) and not task.done():
            await asyncio.sleep(0.01)
        print("in:cmd", flush=True)
        if kind == "gil":
            hold_gil_until(os.path.join(work, "effects"), seconds + 30)
        first = await task
        results: dict = {"first": [first.exit_code, first.stderr], "refused": 0}
        while True:  # the run of a pair whose lease was not taken over: until it is renewed
            try:
                second = await session.run(f"echo {tag} >> seconds")
                results["second"] = [second.exit_code, second.stderr]
                break
            except SessionError as exc:
                results["second"] = ["refused", str(exc)]
                results["refused"] += 1
                if tag != "b" or results["refused"] >= 100:
                    break
                await asyncio.sleep(0.1)
        with open(os.path.join(work, f"{tag}.result"), "w") as f:
            json.dump(results, f)
        return {"ran": tag}

    return Workflow.plan([Step(id="cmd", fn=step)])


async def main(url: str, run_id: str, mode: str, ttl: str, kind: str, seconds: str, work: str) -> int:
    store = create_store(url)
    await store.setup()
    tag = "start" if mode == "pair" else mode
    runner = Runner(make_workflow(store, tag, kind, float(seconds), work), store, lease_ttl=float(ttl))
    try:
        if mode == "pair":  # two runs in this process, as a worker's pool of threads has
            other = Runner(make_workflow(store, "b", kind, float(seconds), work), store, lease_ttl=float(ttl))
            outcomes = await asyncio.gather(
                runner.start(run_id, {"user_input": "go"}),
                other.start(f"{run_id}-b", {"user_input": "go"}),
                return_exceptions=True,
            )
            print(" ".join("LEASE_LOST" if isinstance(o, LeaseLost) else str(o.status) for o in outcomes))
            return 0
        if mode == "start":
            result = await runner.start(run_id, {"user_input": "go"})
        else:
            result = await runner.resume(run_id)
        print(result.status, flush=True)
        return 0
    except LeaseLost:
        print("LEASE_LOST", flush=True)
        return 3
    finally:
        await store.aclose()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:])))
