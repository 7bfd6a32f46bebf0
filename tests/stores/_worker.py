"""A separate writer process for the multi-process store tests.

    python -m tests.stores._worker URL RUN_ID MODE ARGS...

append TAG N      append TAG0..TAG{N-1} to state["items"], retrying on VersionConflict
race GO_FILE      load, wait for GO_FILE, commit once; print "won" or "conflict"
churn             write full 256 KB states forever, printing "saved STEP" after each
seal              append item(STEP) forever, a tail of 3 deltas sealed into a segment at every
                  third commit, printing "saved STEP" after each
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import time

from tether.errors import VersionConflict
from tether.state import ExecutionContext, default_registry
from tether.stores import CompactionPolicy, create_store


def blob(step: int) -> bytes:
    seed = hashlib.sha256(str(step).encode()).digest()
    return seed * (256 * 1024 // len(seed))


def item(step: int) -> str:
    return f"{step}:" + hashlib.sha256(str(step).encode()).hexdigest() * 64


REDUCERS = default_registry().register("items", "append")


async def main(url: str, run_id: str, mode: str, *args: str) -> None:
    store = create_store(url)
    await store.setup()
    try:
        if mode == "append":
            tag, n = args[0], int(args[1])
            conflicts = 0
            for i in range(n):
                while True:
                    ctx = await store.load_context(run_id, reducers=REDUCERS)
                    assert ctx is not None
                    ctx.merge({"items": [f"{tag}{i}"]})
                    try:
                        await store.commit(ctx)
                        break
                    except VersionConflict:
                        conflicts += 1
            print(f"conflicts {conflicts}", flush=True)
        elif mode == "race":
            ctx = await store.load_context(run_id, reducers=REDUCERS)
            assert ctx is not None
            ctx.merge({"items": [str(os.getpid())]})
            print("ready", flush=True)  # loaded: the test may open the barrier
            while not os.path.exists(args[0]):
                time.sleep(0.001)
            try:
                await store.commit(ctx)
                print("won", flush=True)
            except VersionConflict:
                print("conflict", flush=True)
        elif mode == "churn":
            ctx = await store.load_context(run_id, reducers=REDUCERS) or ExecutionContext(run_id)
            step = int(ctx.get("step", 0))
            while True:
                step += 1
                ctx.restore({"step": step, "blob": blob(step), "items": ctx.get("items", [])})
                await store.commit(ctx)
                print(f"saved {step}", flush=True)
        elif mode == "seal":
            store.compaction = CompactionPolicy(seal_versions=3)
            ctx = await store.load_context(run_id, reducers=REDUCERS) or ExecutionContext(
                run_id, reducers=REDUCERS
            )
            step = len(ctx.get("items", []))
            while True:
                step += 1
                ctx.merge({"items": [item(step)]})
                await store.commit(ctx)
                print(f"saved {step}", flush=True)
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
