"""`tether rekey`: every row of every run re-encrypted under the newest key, online, every
version kept; a rekey killed with SIGKILL in the middle leaves every run loadable (old or new
key, nothing lost), and a rerun finishes. Real SQLite file, real `tether` processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from tether.errors import DecryptionError
from tether.state import Codec, ExecutionContext, RunStatus, generate_key
from tether.stores import open_store

OLD, NEW = generate_key(), generate_key()
RUNS = 120


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/keyed.db"


def _expected(i: int) -> dict:
    return {"messages": [f"m{i}-{k}" for k in range(4 if i % 10 else 1)], "step_output": i}


async def _fill(url: str) -> dict[str, int]:
    """RUNS runs under OLD: most with 4 versions (a full row and deltas), every 10th with one."""
    versions = {}
    async with open_store(url, codec=Codec(encryption_key=OLD)) as store:
        for i in range(RUNS):
            run_id = f"safety-rekey-{i:03d}"
            ctx = ExecutionContext(run_id, {"step_output": i})
            for message in _expected(i)["messages"]:
                ctx.merge({"messages": [message]})
                await store.commit(ctx, node_id="step", status=RunStatus.PAUSED)
            versions[run_id] = ctx.version
    return versions


async def _states(url: str, keys: str) -> dict[str, dict | None]:
    """Each run's latest state as read with ``keys``; None when a row needs another key."""
    out: dict[str, dict | None] = {}
    async with open_store(url, codec=Codec(encryption_key=keys.split(","))) as store:
        for i in range(RUNS):
            run_id = f"safety-rekey-{i:03d}"
            try:
                versions = [info.version for info in await store.history(run_id)]
                cps = [await store.load(run_id, v) for v in versions]
            except DecryptionError:
                out[run_id] = None
                continue
            latest = cps[0]
            assert latest is not None and all(cp is not None for cp in cps)
            out[run_id] = {k: v for k, v in latest.state.items() if not k.startswith("_")}
    return out


async def _every_version(url: str, keys: str, versions: dict[str, int]) -> dict[str, list[dict]]:
    """Every version's state of every run, as read with ``keys``."""
    out: dict[str, list[dict]] = {}
    async with open_store(url, codec=Codec(encryption_key=keys.split(","))) as store:
        for run_id, latest in versions.items():
            cps = [await store.load(run_id, v) for v in range(1, latest + 1)]
            out[run_id] = [{k: v for k, v in cp.state.items() if not k.startswith("_")} for cp in cps if cp]
    return out


def _rekey(tmp_path: Path, keys: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TETHER_ENCRYPTION_KEY": keys}
    return subprocess.Popen(
        [sys.executable, "-m", "tether.cli.app", "rekey", "--store", _url(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def test_rekey_killed_in_the_middle_loses_nothing_and_a_rerun_finishes(tmp_path):
    url = _url(tmp_path)
    versions = asyncio.run(_fill(url))
    expected = {f"safety-rekey-{i:03d}": _expected(i) for i in range(RUNS)}

    before_all = asyncio.run(_every_version(url, OLD, versions))
    assert sum(map(len, before_all.values())) == sum(versions.values())

    proc = _rekey(tmp_path, f"{NEW},{OLD}")
    assert proc.stdout is not None
    done = [proc.stdout.readline() for _ in range(15)]  # 15 runs re-keyed, then SIGKILL
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL and all(line.startswith("rekeyed") for line in done), done

    both = asyncio.run(_states(url, f"{NEW},{OLD}"))
    assert both == expected  # every run loads with the two keys, every state whole
    newest_only = asyncio.run(_states(url, NEW))
    moved = [r for r, state in newest_only.items() if state is not None]
    assert 15 <= len(moved) < RUNS  # the kill landed in the middle
    assert all(newest_only[r] == expected[r] for r in moved)

    rerun = _rekey(tmp_path, f"{NEW},{OLD}")
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert f"{RUNS - len(moved)} re-keyed, {len(moved)} already under the newest key, 0 failed" in out
    assert asyncio.run(_states(url, NEW)) == expected  # the old key can go now
    assert set(asyncio.run(_states(url, OLD)).values()) == {None}

    async def latest_versions() -> dict[str, int]:
        async with open_store(url, codec=Codec(encryption_key=NEW)) as store:
            return {r: (await store.history(r, limit=1))[0].version for r in versions}

    after = asyncio.run(latest_versions())
    assert after == versions  # rows re-encrypted in place: runners keep committing on top
    # no version dropped, each one as it was
    assert asyncio.run(_every_version(url, NEW, versions)) == before_all


def test_rekey_without_a_key_is_one_error_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TETHER_ENCRYPTION_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli.app", "rekey", "--store", _url(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1 and done.stderr.startswith("error: no encryption key")


async def test_a_live_writer_keeps_committing_through_a_rekey(tmp_path):
    """Online: the context a runner holds commits its next version on the re-keyed run."""
    from tether.stores.rekey import rekey

    url = _url(tmp_path)
    async with open_store(url, codec=Codec(encryption_key=[NEW, OLD])) as old_writer:
        ctx = ExecutionContext("safety-rekey-live", {"n": 0})
        await old_writer.commit(ctx)
        for n in range(1, 4):
            ctx.merge({"n": n})
            await old_writer.commit(ctx)
    async with open_store(url, codec=Codec(encryption_key=OLD)) as legacy:  # rows under OLD
        ctx2 = ExecutionContext("safety-rekey-old", {"n": 0})
        await legacy.commit(ctx2)
        ctx2.merge({"n": 1})
        await legacy.commit(ctx2)
    report = await rekey(url, encryption_key=f"{NEW},{OLD}")
    assert report.ok and report.rekeyed == ["safety-rekey-old"] and report.current == ["safety-rekey-live"]
    async with open_store(url, codec=Codec(encryption_key=[NEW, OLD])) as writer:
        ctx2.merge({"n": 2})
        assert await writer.commit(ctx2) == 3  # the same context, on top of the rebased row
    async with open_store(url, codec=Codec(encryption_key=NEW)) as reader:
        cp = await reader.load("safety-rekey-old")
        assert cp is not None and cp.state["n"] == 2
        assert len(await reader.history("safety-rekey-live")) == 4  # already under NEW: history kept
        assert len(await reader.history("safety-rekey-old")) == 3  # re-keyed: history kept too
        first = await reader.load("safety-rekey-old", 1)
        assert first is not None and first.state["n"] == 0
