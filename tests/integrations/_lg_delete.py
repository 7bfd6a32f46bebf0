"""Child process for the delete_for_runs crash test: delete run ``r2`` of a thread and
stop for good (to be killed) at one point of the rebuild."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from tether.integrations.langgraph import TetherSaver
from tether.integrations.langgraph._layout import ns_key

if __name__ == "__main__":
    url, thread, point, stall = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    with TetherSaver.from_url(url) as saver:
        store = saver.store
        twin = saver.inline_store.twin  # type: ignore[union-attr]  # commits go through it
        key = ns_key(thread, "")
        real_delete, real_commit = store.delete, twin.commit
        deleted = False

        def stop() -> None:
            stall.write_text(point)
            time.sleep(60)  # blocks the store's loop until the test kills the process

        async def delete(run_id: str) -> bool:
            global deleted
            done = await real_delete(run_id)
            if run_id == key:
                deleted = True
                if point == "deleted":
                    stop()
            return done

        async def commit(ctx: Any, **kw: Any) -> int:
            version = await real_commit(ctx, **kw)
            if point == "scratch" and ctx.run_id == key + "~rw":
                stop()
            if point == "copying" and ctx.run_id == key and deleted:
                stop()
            return version

        store.delete = delete  # type: ignore[method-assign]
        twin.commit = commit
        saver.delete_for_runs(["r2"])
    os._exit(0)
