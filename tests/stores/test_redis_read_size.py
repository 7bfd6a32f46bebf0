"""The Redis blocking twin reads its socket in large pieces (a cold load of a big chain is
a few reads, not hundreds), unless the caller says otherwise."""

from __future__ import annotations

from tether.stores.redis.store import READ_SIZE, RedisBackend


def test_the_twin_reads_a_mebibyte_at_a_time_unless_told() -> None:
    twin = RedisBackend.blocking_from_url("redis://127.0.0.1:1/0")  # (connects on first use)
    assert twin.client.connection_pool.connection_kwargs["socket_read_size"] == READ_SIZE == 1 << 20
    mine = RedisBackend.blocking_from_url("redis://127.0.0.1:1/0", socket_read_size=4096)
    assert mine.client.connection_pool.connection_kwargs["socket_read_size"] == 4096
