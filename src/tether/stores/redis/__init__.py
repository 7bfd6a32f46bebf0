"""Redis store: checkpoints in plain Redis (>= 5: no modules, no Redis 7 functions).

- :mod:`.store`: :class:`RedisStore`, the checkpoint store;
- :mod:`.cache`: :class:`RedisCache`, the same keys as a tiered store's copy of SQL;
- :mod:`.scripts` and the ``*.lua`` files: every change to a run is one script;
- :mod:`.pipeline`: a raw pipeline for the hot reads; :mod:`.keyspace`: what the store
  and the cache share (keys, error translation, reads); :mod:`.records`: field formats.

Key layout per run (``P`` is the prefix, ``tether:`` by default)::

    P run:<id>     hash: status, version, node_id, chain stats, created/updated/expires_at,
                   carriers: the latest chain's rows that hold a payload ("1,9,41,42")
                   (+ epoch and lease:<token> fields when it is a tiered store's copy)
    P rows:<id>    hash: version -> payload bytes ("" for a sealed version, whose ops are in
                   the segment row before it; a tiered copy refilled from SQL holds only
                   the rows a load reads), and "_base": the latest chain's full row
    P hist:<id>    sorted set scored by version; member "v|kind|nbytes|status|ts|node"
    P full:<id>    sorted set of the versions stored as full states
    P runs         sorted set of run ids scored by updated_at (``list_runs``)
    P gen:<id>     fence counter of a tiered copy (see cache.py); expires in 1 h
"""

from __future__ import annotations

from tether.errors import ConfigError

try:
    import redis.asyncio  # noqa: F401  (the driver; checked here, before any module needs it)
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigError("RedisStore needs redis: pip install 'tether[redis]'") from exc

from tether.stores.redis.cache import RedisCache
from tether.stores.redis.store import RedisStore

__all__ = ["RedisCache", "RedisStore"]
