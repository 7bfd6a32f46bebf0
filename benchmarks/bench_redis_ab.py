#!/usr/bin/env python
"""A/B of the Redis store against an older version of it, in one process, rep by rep.

A change that should not move the Redis store's speed is hard to judge from two runs of
``bench_stores.py`` on a busy host: minutes apart, few reps. This loads an older
``RedisStore`` from a file (under another module name, against today's ``tether``) and
times it beside today's, alternating which goes first, with wall and CPU (process) time::

    git show 5fe9769:src/tether/stores/redis.py > /tmp/old_redis.py
    .venv/bin/python benchmarks/bench_redis_ab.py /tmp/old_redis.py [--reps 200] [--url redis://...]

The old module must still import against today's ``tether.stores.base``. CPU time is the
steadier figure on a loaded host: it leaves out the server and the scheduler.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tether.state.context import ExecutionContext
from tether.stores.base import CheckpointStore
from tether.stores.redis import RedisStore

Timings = dict[tuple[str, str, str], list[tuple[float, float]]]


def load_old(path: str) -> type[CheckpointStore]:
    spec = importlib.util.spec_from_file_location("old_redis_store", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls: type[CheckpointStore] = module.RedisStore
    return cls


def state(nbytes: int) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": "x" * 960, "i": i} for i in range(max(1, nbytes // 1000))]
    }


async def timed(out: Timings, key: tuple[str, str, str], fn: Callable[[], Awaitable[Any]]) -> None:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    await fn()
    out.setdefault(key, []).append(((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000))


async def run(old_cls: type[CheckpointStore], url: str, reps: int) -> Timings:
    out: Timings = {}
    classes: dict[str, Any] = {"old": old_cls, "new": RedisStore}
    tag = uuid.uuid4().hex[:6]
    stores = {name: cls.from_url(url, prefix=f"bench-ab:{name}:{tag}:") for name, cls in classes.items()}
    fresh = {name: classes[name].from_url(url, prefix=s.prefix) for name, s in stores.items()}
    try:
        for s in stores.values():
            await s.setup()
        for label, nbytes in (("1KB", 1000), ("100KB", 100_000), ("1MB", 1_000_000)):
            data = state(nbytes)
            for r in range(reps if nbytes < 1_000_000 else max(reps // 3, 1)):
                for name in ("old", "new") if r % 2 else ("new", "old"):
                    s, f = stores[name], fresh[name]
                    ctx = ExecutionContext(f"ab-{uuid.uuid4().hex}", data)
                    await timed(out, (label, "save", name), lambda s=s, ctx=ctx: s.commit(ctx))
                    await timed(out, (label, "load", name), lambda s=s, ctx=ctx: s.load(ctx.run_id))
                    await timed(out, (label, "load fresh", name), lambda f=f, ctx=ctx: f.load(ctx.run_id))
                    await s.delete(ctx.run_id)
        runs = {name: ExecutionContext(f"ab-{uuid.uuid4().hex}", state(1_000_000)) for name in stores}
        for name, s in stores.items():
            await s.commit(runs[name])
        for r in range(reps * 2):
            for name in ("old", "new") if r % 2 else ("new", "old"):
                s, ctx = stores[name], runs[name]

                async def step(s: Any = s, ctx: ExecutionContext = ctx, r: int = r) -> None:
                    ctx.merge({"messages": [{"role": "user", "content": "y" * 960, "i": r}]})
                    await s.commit(ctx)

                await timed(out, ("1MB+", "append step", name), step)
                await timed(out, ("1MB+", "load after", name), lambda s=s, ctx=ctx: s.load(ctx.run_id))
        for name, s in stores.items():
            await s.delete(runs[name].run_id)
    finally:
        for s in (*stores.values(), *fresh.values()):
            await s.aclose()
    return out


def report(out: Timings, reps: int) -> None:
    print(f"{'state':6} {'op':12} {'old ms':>8} {'new ms':>8} {'new/old':>8}   cpu old / new / ratio")
    print(f"(medians; {reps} reps, 1 MB a third of that; old and new alternate which goes first)")
    for label, op in dict.fromkeys(k[:2] for k in out):
        walls = [statistics.median(w for w, _ in out[(label, op, n)]) for n in ("old", "new")]
        cpus = [statistics.median(c for _, c in out[(label, op, n)]) for n in ("old", "new")]
        print(
            f"{label:6} {op:12} {walls[0]:8.3f} {walls[1]:8.3f} {walls[1] / walls[0]:8.2f}"
            f"   {cpus[0]:7.3f} {cpus[1]:7.3f} {cpus[1] / cpus[0]:6.2f}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old", help="path of an older src/tether/stores/redis.py (or store module)")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    args = p.parse_args()
    report(asyncio.run(run(load_old(args.old), args.url, args.reps)), args.reps)


if __name__ == "__main__":
    main()
