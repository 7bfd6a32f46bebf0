"""A raw RESP pipeline: several commands in one round trip on one pooled connection.

redis-py's ``Pipeline`` spends about as long on its bookkeeping as a loopback round trip
takes, and a chain load is one or two round trips; so the hot reads go through this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc


class RawPipeline:
    """Sends commands (argument tuples, or bytes packed already) and reads every reply."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client

    async def send(self, *commands: tuple[Any, ...] | bytes) -> list[Any]:
        """The replies of ``commands``, in order; the first error reply is raised once every
        reply is read, so the connection goes back to the pool in a clean state."""
        pool = self.client.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            packed: list[bytes | memoryview] = []
            for command in commands:
                if type(command) is bytes:
                    packed.append(command)
                else:
                    packed.extend(conn.pack_command(*command))
            await conn.send_packed_command(packed)
            replies = []
            error: Exception | None = None
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except rexc.ResponseError as exc:  # read the rest: the connection stays usable
                    error = error or exc
            if error is not None:
                raise error
            return replies
        except BaseException as exc:
            if not isinstance(exc, rexc.ResponseError):
                await conn.disconnect()  # half read: never hand it back to the pool as is
            raise
        finally:
            await pool.release(conn)


def hmget_rows(rows_key: str, versions: Sequence[int]) -> bytes:
    """``HMGET rows_key _base versions...``, packed here: a long chain's HMGET has a
    thousand arguments, which redis-py's general packer packs several times slower."""
    key = rows_key.encode()
    head = b"*%d\r\n$5\r\nHMGET\r\n$%d\r\n%s\r\n$5\r\n_base\r\n" % (len(versions) + 3, len(key), key)
    return head + b"".join([b"$%d\r\n%d\r\n" % (len(str(v)), v) for v in versions])
