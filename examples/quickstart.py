"""README quickstart: run it twice and the second run continues the first (version 2)."""

from __future__ import annotations

import asyncio

from tether.state import ExecutionContext
from tether.stores import open_store


async def main() -> None:
    async with open_store("sqlite:///tether.db") as store:
        ctx = await store.load_context("run-1") or ExecutionContext("run-1", {"messages": []})
        ctx.merge({"messages": [{"role": "user", "content": "deploy my app"}]})  # appends
        ctx.mark_executed("ask")
        version = await store.commit(ctx, node_id="ask")  # durable when it returns
        print(version, (await store.load("run-1")).state)


asyncio.run(main())
