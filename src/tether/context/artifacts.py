"""Artefact stores: where full tool outputs and pre-compression history are kept.

What leaves the prompt must stay readable, or trimming and compression would lose data.
Ids are content hashes, so writing the same history twice costs nothing and the id in a
summary always names exactly the text that was folded.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

import orjson

from tether.context.items import ContextItem
from tether.errors import ContextError

logger = logging.getLogger(__name__)

__all__ = [
    "ArtifactNotFound",
    "ArtifactStore",
    "FileArtifactStore",
    "InMemoryArtifactStore",
    "archive_items",
    "artifact_id_for",
    "load_archived_items",
]

_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class ArtifactNotFound(ContextError, KeyError):
    """No artefact with that id (never written, or written to another store)."""

    def __init__(self, artifact_id: str) -> None:
        super().__init__(f"artifact {artifact_id!r} not found")
        self.artifact_id = artifact_id

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def artifact_id_for(data: str, kind: str = "text") -> str:
    """Content-addressed id: ``<kind>-<first 20 hex of sha256>``."""
    digest = hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    safe_kind = re.sub(r"[^a-z0-9_.-]", "-", kind.lower())[:32] or "text"
    return f"{safe_kind}-{digest}"


@runtime_checkable
class ArtifactStore(Protocol):
    """Text blobs by id; synchronous because writes are small and between model calls."""

    def put(self, data: str, *, kind: str = "text") -> str:
        """Store ``data`` and return its id (idempotent for equal data)."""
        ...

    def get(self, artifact_id: str) -> str:
        """The stored text; :class:`ArtifactNotFound` if there is none."""
        ...

    def exists(self, artifact_id: str) -> bool: ...

    def ids(self) -> Iterator[str]: ...


class InMemoryArtifactStore:
    """For tests and short runs; lost with the process."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}

    def put(self, data: str, *, kind: str = "text") -> str:
        artifact_id = artifact_id_for(data, kind)
        self._data.setdefault(artifact_id, data)
        return artifact_id

    def get(self, artifact_id: str) -> str:
        try:
            return self._data[artifact_id]
        except KeyError:
            raise ArtifactNotFound(artifact_id) from None

    def exists(self, artifact_id: str) -> bool:
        return artifact_id in self._data

    def ids(self) -> Iterator[str]:
        return iter(list(self._data))


class FileArtifactStore:
    """One UTF-8 file per artefact under ``root``, written atomically (tmp + rename)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, artifact_id: str) -> Path:
        if not _ID.match(artifact_id):
            raise ArtifactNotFound(artifact_id)
        return self.root / f"{artifact_id}.txt"

    def put(self, data: str, *, kind: str = "text") -> str:
        artifact_id = artifact_id_for(data, kind)
        path = self._path(artifact_id)
        if path.exists():
            return artifact_id
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".txt")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        logger.debug("artifact %s written (%d chars)", artifact_id, len(data))
        return artifact_id

    def get(self, artifact_id: str) -> str:
        path = self._path(artifact_id)
        try:
            return path.read_text(encoding="utf-8", errors="surrogatepass")
        except FileNotFoundError:
            raise ArtifactNotFound(artifact_id) from None

    def exists(self, artifact_id: str) -> bool:
        try:
            return self._path(artifact_id).exists()
        except ArtifactNotFound:
            return False

    def ids(self) -> Iterator[str]:
        return (p.stem for p in sorted(self.root.glob("*.txt")) if not p.name.startswith("."))


def archive_items(store: ArtifactStore, items: Iterable[ContextItem]) -> str:
    """Write items as JSON before a compression, so that it can be undone exactly."""
    payload = orjson.dumps([item.to_dict() for item in items]).decode()
    return store.put(payload, kind="history")


def load_archived_items(store: ArtifactStore, artifact_id: str) -> list[ContextItem]:
    """The items :func:`archive_items` wrote, equal to the originals."""
    try:
        data = orjson.loads(store.get(artifact_id))
    except orjson.JSONDecodeError as exc:
        raise ContextError(f"artifact {artifact_id!r} is not an item archive: {exc}") from exc
    if not isinstance(data, list):
        raise ContextError(f"artifact {artifact_id!r} is not an item archive")
    return [ContextItem.from_dict(d) for d in data]
