"""Shared pieces of the routers: the store, the executor, JSON responses."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import importlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request, Response

from tether.runtime import runtime_reducers
from tether.runtime.stream import EventBroadcaster
from tether.server.auth import ApiToken, require
from tether.server.executor import Executor
from tether.state import ReducerRegistry
from tether.state.model import RunInfo
from tether.stores.base import CheckpointStore

__all__ = [
    "Admin",
    "Encoded",
    "Events",
    "Exec",
    "Operator",
    "Reader",
    "PACKERS",
    "SnapshotCache",
    "Store",
    "StreamedBytes",
    "body_response",
    "encode",
    "json_response",
    "per_version",
    "reducers",
]

logger = logging.getLogger(__name__)


async def _store(request: Request) -> CheckpointStore:
    store: CheckpointStore = request.app.state.store
    return store


async def _executor(request: Request) -> Executor:
    executor: Executor = request.app.state.executor
    return executor


async def _events(request: Request) -> EventBroadcaster:
    events: EventBroadcaster = request.app.state.events
    return events


# async on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, a thread
# hop per dependency per request
Store = Annotated[CheckpointStore, Depends(_store)]
Exec = Annotated[Executor, Depends(_executor)]
Events = Annotated[EventBroadcaster, Depends(_events)]
Reader = Annotated[ApiToken, Depends(require("read"))]
Operator = Annotated[ApiToken, Depends(require("operate"))]
Admin = Annotated[ApiToken, Depends(require("admin"))]


def reducers(executor: Executor) -> ReducerRegistry:
    return runtime_reducers(executor.reducers)


def _default(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return {"$bytes": len(obj)}
    if isinstance(obj, dt.datetime | dt.date):
        return obj.isoformat()
    return str(obj)


def encode(data: Any) -> bytes:
    """orjson straight to bytes: a 10 MB state is encoded once, without pydantic."""
    return orjson.dumps(data, default=_default, option=orjson.OPT_NON_STR_KEYS)


def json_response(data: Any, status: int = 200) -> Response:
    return Response(encode(data), status_code=status, media_type="application/json")


STREAM_CHUNK = 512 * 1024
"""Bodies larger than this go out in slices of this size (see ``StreamedBytes``)."""


class StreamedBytes(Response):
    """Bytes already made (a cached snapshot body), sent in slices of one buffer.

    Handed to the server in one piece, a 10 MB body sits in the connection's write buffer
    and the server counts the response as done at once: its keep-alive timer starts while
    a slow reader is still receiving (uvicorn then closes the connection under it), and 50
    such bodies are 500 MB queued at once. In slices, each one is handed over when the
    previous has drained (the server awaits its flow control between ``send`` calls), so
    the response ends when its last bytes leave. The slices are ``memoryview`` s of the
    cached bytes: no copy (uvicorn and httpx's ASGI transport take any bytes-like body).
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        view = memoryview(self.body)
        size = len(view)
        for at in range(0, size, STREAM_CHUNK):
            end = at + STREAM_CHUNK
            await send({"type": "http.response.body", "body": view[at:end], "more_body": end < size})


def body_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response of ``body``, streamed in slices when it is large."""
    kind = StreamedBytes if len(body) > STREAM_CHUNK else Response
    return kind(body, status_code=status, media_type="application/json", headers=headers)


async def per_version(
    request: Request,
    store: CheckpointStore,
    run_id: str,
    kind: str,
    build: Callable[[], Awaitable[tuple[Any, int]]],
) -> Response:
    """A read whose answer depends only on the run's latest version (context usage, the
    failure report): made once per version and kept in the snapshot cache, so dashboards
    re-reading a big run after each event do not each read and decode its state.

    ``build`` returns the answer and the version it was made from; an answer made from a
    version newer than the one read first is served but not kept.
    """
    from tether.errors import RunNotFound

    info = await store.get_run(run_id)
    if info is None:
        raise RunNotFound(run_id)

    async def make() -> tuple[bytes, bool]:
        data, version = await build()
        return encode(data), version == info.version

    cache: SnapshotCache = request.app.state.snapshots
    entry = await cache.fetch(run_id, info.version, f"{kind}-{incarnation(info)}", make)
    return body_response(entry.body)


def incarnation(info: RunInfo) -> str:
    """Which run of this id a version belongs to: a run deleted and created again starts at
    version 1 again, and its versions must not match the old run's cached bodies or ETags."""
    return format(int(info.created_at.timestamp() * 1_000_000), "x")


class Encoded:
    """One snapshot encoded once: the JSON bytes and, made on demand, its compressed forms.

    gzip is made when first asked for and awaited (a fraction of a second for 10 MiB);
    zstd is made at a high level in the background and served only once it is ready, so
    nobody waits for it (see ``SnapshotCache.zstd``).
    """

    __slots__ = ("_packed", "body", "on_grow")

    def __init__(self, body: bytes) -> None:
        self.body = body
        self._packed: dict[str, asyncio.Future[bytes]] = {}
        self.on_grow: Callable[[], None] | None = None

    @property
    def size(self) -> int:
        return len(self.body) + sum(len(f.result()) for f in self._packed.values() if _ok(f))

    def ready(self, coding: str) -> bytes | None:
        """The body in ``coding`` if it has been made, without waiting."""
        found = self._packed.get(coding)
        return found.result() if found is not None and _ok(found) else None

    def building(self, coding: str) -> bool:
        return coding in self._packed

    def start(self, coding: str) -> asyncio.Future[bytes]:
        """Make the body in ``coding`` in a worker thread (once); the compressors drop the
        GIL, so the event loop keeps serving meanwhile."""
        found = self._packed.get(coding)
        if found is not None:
            return found
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(PACKERS[coding], self.body))
        self._packed[coding] = task
        task.add_done_callback(lambda t: self._made(coding, t))
        return task

    def _made(self, coding: str, task: asyncio.Future[bytes]) -> None:
        if not _ok(task):
            if self._packed.get(coding) is task:
                del self._packed[coding]  # a failed build is tried again by a later request
            if not task.cancelled():
                logger.warning("compressing a snapshot with %s failed: %r", coding, task.exception())
            return
        if self.on_grow is not None:
            self.on_grow()

    async def packed(self, coding: str) -> bytes:
        """The body in ``coding``, made by whichever request asks first, awaited."""
        return await asyncio.shield(self.start(coding))

    async def gzipped(self) -> bytes:
        return await self.packed("gzip")


def _ok(future: asyncio.Future[bytes]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


GZIP_LEVEL = 5
"""JSON of agent state shrinks 3-5x at this level; higher levels cost far more time for little."""

ZSTD_LEVEL = 19
"""The smallest bodies for the build time (see benchmarks/README.md); made in the background."""


def _gzip(body: bytes) -> bytes:
    return gzip.compress(body, GZIP_LEVEL, mtime=0)


def _zstd_compressor() -> Callable[[bytes], bytes] | None:
    """Python's own zstd (3.14+), else the ``zstandard`` package, else none (not offered)."""
    try:
        native: Any = importlib.import_module("compression.zstd")
    except ImportError:
        pass
    else:
        return lambda body: bytes(native.compress(body, level=ZSTD_LEVEL))
    try:
        import zstandard
    except ImportError:
        return None
    return lambda body: zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(body)


PACKERS: dict[str, Callable[[bytes], bytes]] = {"gzip": _gzip}
_zstd = _zstd_compressor()
if _zstd is not None:
    PACKERS["zstd"] = _zstd


class SnapshotCache:
    """Encoded snapshots keyed by run id, version and variant (status, key style).

    Many dashboards watching one big run ask for the same version again and again: each
    version is read from the store, decoded and encoded once (even when 50 requests miss
    at the same moment: the later ones wait for the first), then served as the same
    bytes. A run's new version replaces its old entries. Bounded by total bytes, least
    recently used out first; a body larger than half the bound is served but not kept.
    """

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, int, str], Encoded] = OrderedDict()
        self._building: dict[tuple[str, int, str], asyncio.Future[Encoded]] = {}
        self._slow: asyncio.Future[bytes] | None = None

    def get(self, run_id: str, version: int, variant: str) -> Encoded | None:
        key = (run_id, version, variant)
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    async def fetch(
        self, run_id: str, version: int, variant: str, build: Callable[[], Awaitable[tuple[bytes, bool]]]
    ) -> Encoded:
        """The entry for ``(run_id, version, variant)``, built by ``build`` once however many ask.

        ``build`` returns the body and whether it may be kept (False when the store moved
        on between reading the version and reading the snapshot).
        """
        key = (run_id, version, variant)
        hit = self.get(run_id, version, variant)
        if hit is not None:
            return hit
        pending = self._building.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Encoded] = asyncio.get_running_loop().create_future()
        self._building[key] = future
        try:
            body, keep = await build()
            entry = Encoded(body)
            if keep:
                self._put(key, entry)
            future.set_result(entry)
            return entry
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # waiters get it; nobody waiting is fine too
            raise
        finally:
            self._building.pop(key, None)

    def _put(self, key: tuple[str, int, str], entry: Encoded) -> None:
        for old in [k for k in self._items if k[0] == key[0] and k[1] < key[1]]:
            del self._items[old]  # a new version makes the run's older ones useless
        if len(entry.body) > self.max_bytes // 2:
            return
        self._items[key] = entry
        entry.on_grow = self.trim
        self.trim()

    def packed_if_ready(
        self, run_id: str, version: int, variant: str, entry: Encoded, coding: str
    ) -> bytes | None:
        """``entry``'s body in a slow ``coding`` if it is made, else None at once.

        When it is not made, starts making it: only for an entry the cache keeps (nobody
        else could reuse it) and one such build at a time for the whole server, so a live
        run whose versions come faster than the builds keeps at most one core busy.
        """
        made = entry.ready(coding)
        if made is not None or entry.building(coding):
            return made
        if self._items.get((run_id, version, variant)) is not entry:
            return None
        if self._slow is not None and not self._slow.done():
            return None
        self._slow = entry.start(coding)
        return None

    @property
    def size(self) -> int:
        return sum(e.size for e in self._items.values())

    def trim(self) -> None:
        """Drop the least recently used entries until the bound holds (gzip included)."""
        total = self.size
        while total > self.max_bytes and self._items:
            _, dropped = self._items.popitem(last=False)
            total -= dropped.size


def epoch_ms(ts: dt.datetime) -> int:
    return int(ts.timestamp() * 1000)
