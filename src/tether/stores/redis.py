"""Redis store: checkpoints in plain Redis (>= 5: no modules, no Redis 7 functions).

Key layout per run (``P`` is the prefix, ``tether:`` by default)::

    P run:<id>     hash: status, version, node_id, chain stats, created/updated/expires_at,
                   carriers: the latest chain's rows that hold a payload ("1,9,41,42")
                   (+ epoch and lease:<token> fields when it is a TieredStore's cache)
    P rows:<id>    hash: version -> payload bytes ("" for a sealed version, whose ops are in
                   the segment row before it; a tiered copy refilled from SQL holds only
                   the rows a load reads), and "_base": the latest chain's full row
    P hist:<id>    sorted set scored by version; member "v|kind|nbytes|status|ts|node"
    P full:<id>    sorted set of the versions stored as full states
    P runs         sorted set of run ids scored by updated_at (``list_runs``)
    P gen:<id>     fence counter of a tiered cache copy (see tiered.py); expires in 1 h

Every change is one Lua script (EVALSHA), so it is atomic: a write checks the
expected version and status, appends the row, updates the run record and sets the
TTLs in one step, and two processes racing on one version cannot both win. A save
is one round trip; loading the latest state is one too (two for chains over 1 MiB,
whose payloads skip the copy Lua makes of every string it returns).

Expiry is Redis's own: every key of a run gets ``PEXPIREAT`` at the run's
``expires_at`` (``PERSIST`` when None). Expired runs leave stale ids in ``P runs``;
``list_runs`` skips and removes them, ``purge_expired`` sweeps them all.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tether.errors import (
    CheckpointCorrupt,
    ConfigError,
    RunNotFound,
    RunNotPaused,
    StateTooLarge,
    StoreError,
    StoreNotWritable,
    StoreUnavailable,
    TetherError,
    VersionConflict,
)
from tether.state.model import ChainStats, CheckpointInfo, RunInfo, RunStatus, _chain_stats
from tether.stores._retry import retried
from tether.stores.base import CheckpointStore, StaleSeal, StoredRow, Write, _hint, _utc

try:
    import redis.asyncio as aioredis
    from redis import exceptions as rexc
    from redis.commands.core import AsyncScript
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigError("RedisStore needs redis: pip install 'tether[redis]'") from exc

__all__ = ["RedisStore"]

logger = logging.getLogger(__name__)

INLINE_BYTES = 1 << 20
"""Chains up to this size load in one round trip; bigger ones skip Lua's extra copy."""

CHAIN_INLINE_BYTES = 512 * 1024
"""``load()`` of a run this store has not seen: chains up to this size come back from the
script in one round trip; bigger ones by a second, a plain HMGET, which skips Lua's copies.
A fresh store's load, timed as ``bench_stores.py`` does (a collection before each), against
the floor's GET, inline / two trips: 100 KB 1.19 / 1.82 and 1.46 / 1.54, 512 KB 1.39 / 1.60
and 1.40 / 1.51, 1 MB 1.45 / 1.36 and 1.52 / 1.49 (two runs; the limit was 64 KB)."""

GEN_TTL_MS = 3_600_000
"""How long a ``gen`` fence outlives its last bump: far longer than any cache refill."""

# Helpers every script starts with. A run hash holds the run record and, in tiered
# mode, one ``lease:<token>`` field (value: deadline in ms) per writer in flight.
_PRELUDE = """
if redis.replicate_commands then redis.replicate_commands() end
local function server_epoch()  -- changes on every restart: a snapshot may be stale
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
end
local function set_ttl(keys, ms)
  for _, k in ipairs(keys) do
    if ms == '' then redis.call('PERSIST', k) else redis.call('PEXPIREAT', k, ms) end
  end
end
local function fence(gen)
  redis.call('INCR', gen)
  redis.call('PEXPIRE', gen, GEN_TTL_MS)
end
local function read_run(run)
  local flat = redis.call('HGETALL', run)
  local info, leases, fields = {}, {}, {}
  for i = 1, #flat, 2 do
    if string.sub(flat[i], 1, 6) == 'lease:' then
      leases[flat[i]] = tonumber(flat[i + 1])
    else
      info[flat[i]] = flat[i + 1]
      fields[#fields + 1] = flat[i]
      fields[#fields + 1] = flat[i + 1]
    end
  end
  return info, leases, fields
end
local function carriers_after(cs, kind, v, a, bv, current)
  -- the chain's rows with a payload once version v is written (see the key layout)
  if kind == 'full' then return tostring(v) end
  if not cs then  -- a chain written before this field: every row since the base
    local t = {}
    for i = bv, current do t[#t + 1] = i end
    cs = table.concat(t, ',')
  end
  if kind ~= 'segment' then return cs .. ',' .. v end
  local t = {}
  for c in string.gmatch(cs, '%d+') do
    if tonumber(c) < a then t[#t + 1] = c end
  end
  t[#t + 1] = a
  return table.concat(t, ',')
end
local function drop(keys)  -- forget a cached copy, keeping the leases of writers in flight
  local _, leases = read_run(keys[1])
  redis.call('DEL', keys[1], keys[2], keys[3], keys[4])
  local last = 0
  for f, d in pairs(leases) do
    redis.call('HSET', keys[1], f, d)
    if d > last then last = d end
  end
  if last > 0 then redis.call('PEXPIREAT', keys[1], last) end
end
""".replace("GEN_TTL_MS", str(GEN_TTL_MS))

# KEYS: run rows hist full index gen
# ARGV (the write id last: 18 in write mode, 24 in mirror mode)
#       1 mode (write|mirror) 2 run_id 3 expected ('' = any) 4 require_status 5 kind
#       6 payload 7 member tail 8 status 9 node_set 10 node 11 created_at 12 expires_ms
#       13 expires_at 14 growth 15 rewrite 16 indexed 17 seal_from (a segment write: the
#       payload goes to that row, which must hold a delta or a segment, no row up to the
#       new one may be full, and they become sealed); mirror: 18 token, 19..23 chain
_WRITE = (
    _PRELUDE
    + """
local run, rows, hist, full = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mode = ARGV[1]
local info = read_run(run)
local current = tonumber(info['version']) or 0
local epoch = ''
local wid = ARGV[18] or ''
if mode == 'mirror' then wid = ARGV[24] or '' end
if mode ~= 'mirror' and wid ~= '' and info['wid'] == wid then
  -- this very write landed and its reply was lost: answer as the write did
  return {'ok', current, info['base_version'], info['base_bytes'], info['growth_bytes'],
    info['rewrite_bytes'], info['chain_len'], info['carriers'] or ''}
end
if mode == 'mirror' then
  redis.call('HDEL', run, 'lease:' .. ARGV[18])
  epoch = server_epoch()
  if tonumber(ARGV[3]) ~= current or (current > 0 and info['epoch'] ~= epoch) then
    drop(KEYS)
    fence(KEYS[6])
    return {'dropped', current}
  end
elseif ARGV[3] ~= '' and tonumber(ARGV[3]) ~= current then
  return {'conflict', current}
end
if ARGV[4] ~= '' and info['status'] ~= ARGV[4] then
  return {'status', info['status'] or 'missing'}
end
local kind, payload = ARGV[5], ARGV[6]
if current == 0 and kind ~= 'full' then return {'missing', 0} end
local v = current + 1
local bv, bb, gb, rb, len
if mode == 'mirror' then
  bv, bb, gb, rb, len = ARGV[19], ARGV[20], ARGV[21], ARGV[22], ARGV[23]
elseif kind == 'full' then
  bv, bb, gb, rb, len = v, #payload, 0, 0, 0
else
  bv, bb = tonumber(info['base_version']), tonumber(info['base_bytes'])
  gb = tonumber(info['growth_bytes']) + tonumber(ARGV[14])
  rb = tonumber(info['rewrite_bytes']) + tonumber(ARGV[15])
  len = tonumber(info['chain_len']) + 1
end
if current == 0 or (mode == 'mirror' and kind == 'full') then
  -- a new run; or a cache, which only needs the chain from its last full row on
  redis.call('DEL', rows, hist, full)
end
if current == 0 then
  if mode ~= 'mirror' then redis.call('DEL', run) end
  redis.call('HSET', run, 'created_at', ARGV[11])
end
local cs = carriers_after(info['carriers'], kind, v, tonumber(ARGV[17]), bv, current)
if kind == 'segment' then
  local a = tonumber(ARGV[17])
  local ms = redis.call('ZRANGEBYSCORE', hist, a, v - 1)
  local head = ms[1] and string.match(ms[1], '^(%d+|%a+)|')
  local fresh = head == a .. '|delta' or head == a .. '|segment'
  for i = 1, #ms do
    if string.match(ms[i], '^%d+|(%a+)|') == 'full' then fresh = false end
  end
  if not fresh then
    if mode ~= 'mirror' then return {'stale', current} end
    drop(KEYS)
    fence(KEYS[6])
    return {'dropped', current}
  end
  for i = 1, #ms do
    local mv, mk = string.match(ms[i], '^(%d+)|(%a+)|')
    local rest = string.match(ms[i], '^%d+|%a+|%d+|(.*)$')
    if i == 1 then
      redis.call('ZREM', hist, ms[i])
      redis.call('HSET', rows, mv, payload)
      redis.call('ZADD', hist, mv, string.format('%d|segment|%d|', mv, #payload) .. rest)
    elseif mk ~= 'sealed' then
      redis.call('ZREM', hist, ms[i])
      redis.call('HSET', rows, mv, '')
      redis.call('ZADD', hist, mv, string.format('%s|sealed|0|', mv) .. rest)
    end
  end
  kind, payload = 'sealed', ''
end
redis.call('HSET', rows, v, payload, '_base', bv)
redis.call('ZADD', hist, v, string.format('%d|%s|%d|', v, kind, #payload) .. ARGV[7])
if kind == 'full' then redis.call('ZADD', full, v, v) end
redis.call('HSET', run, 'version', v, 'status', ARGV[8], 'updated_at', ARGV[11],
  'base_version', bv, 'base_bytes', bb, 'growth_bytes', gb, 'rewrite_bytes', rb,
  'chain_len', len, 'epoch', epoch, 'carriers', cs, 'wid', wid)
if ARGV[9] == '1' then redis.call('HSET', run, 'node_id', ARGV[10])
else redis.call('HDEL', run, 'node_id') end
if ARGV[13] == '' then redis.call('HDEL', run, 'expires_at')
else redis.call('HSET', run, 'expires_at', ARGV[13]) end
set_ttl({run, rows, hist, full}, ARGV[12])
if ARGV[16] == '1' then redis.call('ZADD', KEYS[5], ARGV[11], ARGV[2]) end
return {'ok', v, bv, bb, gb, rb, len, cs}
"""
)

# KEYS: run rows hist full gen.  ARGV: version ('' = latest), tiered, record only,
# inline limit.  -> {0, gen} on a miss, else {1, run fields, members, payloads, inline}.
# In tiered mode a copy with a writer in flight, or from before the server's last
# start, is a miss. Chains bigger than the limit come without payloads (inline = 0):
# Lua copies every string it returns, which doubles the cost of a 10 MB read.
_READ = (
    _PRELUDE
    + """
local info, leases, fields = read_run(KEYS[1])
local miss = {0, redis.call('GET', KEYS[5]) or '0'}
if not info['version'] then return miss end
if ARGV[2] == '1' and (next(leases) ~= nil or info['epoch'] ~= server_epoch()) then
  return miss
end
if ARGV[3] == '1' then return {1, fields, {}, {}} end
local latest = tonumber(info['version'])
local target, base
if ARGV[1] == '' then
  target, base = latest, tonumber(info['base_version'])
else
  target = tonumber(ARGV[1])
  if target < 1 or target > latest then return {1, fields, {}, {}} end
  local f = redis.call('ZREVRANGEBYSCORE', KEYS[4], target, '-inf', 'LIMIT', 0, 1)
  if #f == 0 then return {1, fields, {}, {}} end
  base = tonumber(f[1])
end
local members = redis.call('ZRANGEBYSCORE', KEYS[3], base, target)
local total = 0
for i = 1, #members do total = total + tonumber(string.match(members[i], '^%d+|%a+|(%d+)|')) end
if ARGV[4] ~= '' and total > tonumber(ARGV[4]) then return {1, fields, members, {}, 0} end
local payloads = {}
for i = 1, #members do
  local p = redis.call('HGET', KEYS[2], string.match(members[i], '^(%d+)|'))
  if not p then return {1, fields, {}, {}, 1, string.match(members[i], '^(%d+)|')} end
  payloads[i] = p
end
return {1, fields, members, payloads, 1}
"""
)

# KEYS: run rows.  ARGV: tiered ('1'|'0'), inline limit (bytes).  What ``load()`` needs
# and nothing else: {1, latest, base, carriers, payload...} (the payloads of the rows listed
# in carriers) for chains up to the limit, {1, latest, base, carriers} above it (the client
# then fetches them by HMGET, skipping Lua's string copies, measured at ~2 us per KB), {0}
# for no run, {-1} for a tiered copy not to be trusted.
_CHAIN = """
local h = redis.call('HMGET', KEYS[1], 'version', 'base_version', 'base_bytes', 'growth_bytes',
  'rewrite_bytes', 'epoch', 'carriers')
if not h[1] then return {0} end
if ARGV[1] == '1' then  -- read-only, so no prelude: HSCAN finds leases without a Lua loop
  local cursor = '0'
  repeat
    local page = redis.call('HSCAN', KEYS[1], cursor, 'MATCH', 'lease:*', 'COUNT', 1000)
    if #page[2] > 0 then return {-1} end
    cursor = page[1]
  until cursor == '0'
  if h[6] ~= string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') then return {-1} end
end
local latest, base = tonumber(h[1]), tonumber(h[2])
local vs = {}
if h[7] then
  for c in string.gmatch(h[7], '%d+') do vs[#vs + 1] = c end
else  -- a chain written before carriers were recorded: every row since the base
  for i = base, latest do vs[#vs + 1] = i end
end
local out = {1, latest, base, table.concat(vs, ',')}
if tonumber(h[3]) + tonumber(h[4]) + tonumber(h[5]) > tonumber(ARGV[2]) then return out end
for i = 1, #vs, 1000 do  -- batches keep unpack() within Lua's stack
  local ps = redis.call('HMGET', KEYS[2], unpack(vs, i, math.min(i + 999, #vs)))
  for k = 1, #ps do out[#out + 1] = ps[k] end
end
return out
"""

# KEYS: run rows hist full index gen
# ARGV: status updated_at expires_ms expires_at run_id indexed mode; mirror: version token
_STATUS = (
    _PRELUDE
    + """
local info = read_run(KEYS[1])
if ARGV[7] == 'mirror' then
  redis.call('HDEL', KEYS[1], 'lease:' .. ARGV[9])
  if info['version'] ~= ARGV[8] or info['epoch'] ~= server_epoch() then
    drop(KEYS)
    fence(KEYS[6])
    return 0
  end
end
if not info['version'] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'updated_at', ARGV[2])
if ARGV[4] == '' then redis.call('HDEL', KEYS[1], 'expires_at')
else redis.call('HSET', KEYS[1], 'expires_at', ARGV[4]) end
set_ttl({KEYS[1], KEYS[2], KEYS[3], KEYS[4]}, ARGV[3])
if ARGV[6] == '1' then redis.call('ZADD', KEYS[5], ARGV[2], ARGV[5]) end
return 1
"""
)

# KEYS: run rows hist full index gen.  ARGV: run_id mode (delete|invalidate) token keep
# delete: remove the run, 1 if it existed. invalidate (tiered): release ``token`` and
# drop the copy unless it is at version ``keep``; fences out refills read before now.
_DELETE = (
    _PRELUDE
    + """
if ARGV[2] == 'delete' then
  local existed = redis.call('EXISTS', KEYS[1])
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
  redis.call('ZREM', KEYS[5], ARGV[1])
  return existed
end
if ARGV[3] ~= '' then redis.call('HDEL', KEYS[1], 'lease:' .. ARGV[3]) end
local info = read_run(KEYS[1])
if ARGV[4] ~= '' and info['version'] == ARGV[4] and info['epoch'] == server_epoch() then
  return 0
end
drop(KEYS)
fence(KEYS[6])
return 1
"""
)

# KEYS: run gen.  ARGV: token deadline_ms.  A tiered writer announces itself before its
# SQL commit, so no reader trusts (or refills) the copy until the writer is done.
_BEGIN = (
    _PRELUDE
    + """
fence(KEYS[2])
redis.call('HSET', KEYS[1], 'lease:' .. ARGV[1], ARGV[2])
local info, leases = read_run(KEYS[1])
if not info['version'] then
  local last = 0
  for _, d in pairs(leases) do if d > last then last = d end end
  redis.call('PEXPIREAT', KEYS[1], last)
end
return 1
"""
)

# KEYS: run rows hist full.  ARGV: version payload after.  -> dropped rows, -1 no run, -2
# no row.  ``after`` (when not ''): the segment of the versions after ``version`` that the
# one it was in held, for the row after it.
_REBASE = """
local v = tonumber(ARGV[1])
local h = redis.call('HMGET', KEYS[1], 'version', 'base_version')
if not h[1] then return -1 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return -2 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], v, v)) do
  redis.call('ZREM', KEYS[3], m)
  local rest = string.match(m, '^%d+|%a+|%d+|(.*)$')
  redis.call('ZADD', KEYS[3], v, string.format('%d|full|%d|', v, #ARGV[2]) .. rest)
end
redis.call('ZADD', KEYS[4], v, v)
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], v + 1, ARGV[3])
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], v + 1, v + 1)) do
    redis.call('ZREM', KEYS[3], m)
    local rest = string.match(m, '^%d+|%a+|%d+|(.*)$')
    redis.call('ZADD', KEYS[3], v + 1, string.format('%d|segment|%d|', v + 1, #ARGV[3]) .. rest)
  end
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[1])
for i = 1, #gone, 500 do
  local batch = {}
  for j = i, math.min(i + 499, #gone) do batch[#batch + 1] = string.match(gone[j], '^(%d+)|') end
  redis.call('HDEL', KEYS[2], unpack(batch))
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[1])
if tonumber(h[2]) < v then
  local t = {tostring(v)}
  if ARGV[3] ~= '' then t[2] = tostring(v + 1) end
  local last = tonumber(t[#t])
  local cs = redis.call('HGET', KEYS[1], 'carriers')
  if cs then
    for c in string.gmatch(cs, '%d+') do
      if tonumber(c) > last then t[#t + 1] = c end
    end
  else
    for i = last + 1, tonumber(h[1]) do t[#t + 1] = i end
  end
  redis.call('HSET', KEYS[1], 'base_version', v, 'base_bytes', #ARGV[2],
    'chain_len', tonumber(h[1]) - v, 'carriers', table.concat(t, ','))
  redis.call('HSET', KEYS[2], '_base', v)
end
return #gone
"""

# KEYS: run rows hist full gen.  ARGV: token now_ms expires_ms nfields field value...
# then (version member payload is_full)...  Refills a tiered copy from SQL rows, unless
# a writer began since the miss (``gen`` moved), one is still in flight, or another
# reader already refilled it.
_WARM = (
    _PRELUDE
    + """
if (redis.call('GET', KEYS[5]) or '0') ~= ARGV[1] then return 0 end
local info, leases = read_run(KEYS[1])
local now = tonumber(ARGV[2])
for _, d in pairs(leases) do if d > now then return 0 end end
local epoch = server_epoch()
if info['version'] and info['epoch'] == epoch and next(leases) == nil then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
local n = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'epoch', epoch, unpack(ARGV, 5, 4 + 2 * n))
redis.call('HSET', KEYS[2], '_base', ARGV[5 + 2 * n])
for i = 5 + 2 * n, #ARGV, 4 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
  redis.call('ZADD', KEYS[3], ARGV[i], ARGV[i + 1])
  if ARGV[i + 3] == '1' then redis.call('ZADD', KEYS[4], ARGV[i], ARGV[i]) end
end
set_ttl({KEYS[1], KEYS[2], KEYS[3], KEYS[4]}, ARGV[3])
return 1
"""
)

# KEYS: index, run keys...  ARGV: run ids.  Drops index entries whose run is gone.
_UNINDEX = """
local n = 0
for i = 1, #ARGV do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then n = n + redis.call('ZREM', KEYS[1], ARGV[i]) end
end
return n
"""

_RUN_FIELDS = (
    "status",
    "version",
    "base_version",
    "base_bytes",
    "growth_bytes",
    "rewrite_bytes",
    "chain_len",
    "created_at",
    "updated_at",
)


class RedisStore(CheckpointStore):
    """Checkpoints in Redis, with key TTLs as the expiry policy.

    Args:
        client: a ``redis.asyncio.Redis`` created with ``decode_responses=False``.
            The store does not close a client it was given (``from_url`` does).
        prefix: prepended to every key, so several apps or tests can share a db.
        codec, expiry, compaction: see :class:`CheckpointStore`.
    """

    scheme = "redis"
    _seals = True

    def __init__(
        self, client: aioredis.Redis, *, prefix: str = "tether:", allow_eviction: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.allow_eviction = allow_eviction
        """False: :meth:`setup` refuses a server whose ``maxmemory-policy`` may evict this
        store's keys (every policy but ``noeviction``: tether sets TTLs on its keys, so
        ``volatile-*`` policies can evict them too). True: it logs a warning instead."""
        self._r = client
        self.prefix = prefix
        self._owns_client = False
        self._indexed = True  # TieredStore turns this off: its SQL side lists the runs
        self._index_key = f"{prefix}runs"
        reg = client.register_script
        self._s_write, self._s_read, self._s_status = reg(_WRITE), reg(_READ), reg(_STATUS)
        self._s_delete, self._s_begin, self._s_rebase = reg(_DELETE), reg(_BEGIN), reg(_REBASE)
        self._s_warm, self._s_unindex = reg(_WARM), reg(_UNINDEX)
        self._s_chain = reg(_CHAIN)
        self._hints: dict[str, tuple[int, int, tuple[int, ...]]] = {}
        """(base, latest, carriers) of runs this store last wrote or read: ``load()`` then
        needs no script, only one HMGET (see :func:`_present`)."""

    @classmethod
    def from_url(cls, url: str, *, prefix: str | None = None, **options: Any) -> RedisStore:
        """A store on a new client for ``redis://host:port/db`` (or ``rediss://``).

        ``?prefix=`` in the URL sets the key prefix. ``codec``, ``expiry`` and
        ``compaction`` go to the store, any other option to ``redis.asyncio.from_url``.
        """
        store_opts = {
            k: options.pop(k)
            for k in ("codec", "expiry", "compaction", "retry", "allow_eviction")
            if k in options
        }
        if options.pop("decode_responses", False):
            raise ConfigError("RedisStore stores bytes: do not set decode_responses")
        url, query = _pop_query(url, "prefix")
        url, evict = _pop_query(url, "allow_eviction")
        if evict is not None:
            store_opts["allow_eviction"] = evict.lower() in {"1", "true", "yes", "on"}
        options.setdefault("socket_connect_timeout", 5.0)
        try:
            client = aioredis.Redis.from_url(url, decode_responses=False, **options)
        except ValueError as exc:
            raise ConfigError(f"bad Redis URL {url!r}: {exc}") from exc
        store = cls(client, prefix=prefix or query or "tether:", **store_opts)
        store._owns_client = True
        return store

    # -- plumbing -------------------------------------------------------------------
    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate driver exceptions once, here; our own errors pass through."""
        try:
            yield
        except TetherError:
            raise
        except (rexc.ConnectionError, rexc.TimeoutError, TimeoutError, ConnectionError, OSError) as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        except rexc.RedisError as exc:
            raise _translate(exc) from exc

    def _keys(self, run_id: str) -> list[str]:
        """run, rows, hist and full keys of a run, the order every script expects."""
        p = self.prefix
        return [f"{p}run:{run_id}", f"{p}rows:{run_id}", f"{p}hist:{run_id}", f"{p}full:{run_id}"]

    def _all_keys(self, run_id: str) -> list[str]:
        return [*self._keys(run_id), self._index_key, f"{self.prefix}gen:{run_id}"]

    async def setup(self) -> None:
        """Check the server is reachable and new enough, and preload the scripts."""
        with self._errors():
            info = await self._r.info("server")
            version = str(info.get("redis_version", "0"))
            if int(version.split(".")[0]) < 5:
                raise ConfigError(f"RedisStore needs Redis >= 5, the server runs {version}")
            await self._check_eviction()
            scripts: list[AsyncScript] = [
                self._s_write, self._s_read, self._s_status, self._s_delete, self._s_begin,
                self._s_rebase, self._s_warm, self._s_unindex, self._s_chain,
            ]  # fmt: skip
            for script in scripts:
                await self._r.script_load(script.script)

    async def _check_eviction(self) -> None:
        """Refuse (or, with ``allow_eviction``, warn about) a server that may evict keys: an
        evicted row makes its run unreadable, an evicted run record makes it look new."""
        memory = await self._r.info("memory")
        policy = str(memory.get("maxmemory_policy", "noeviction"))
        if policy == "noeviction":
            return
        message = (
            f"Redis at {self._where()} has maxmemory-policy {policy}: it may evict tether's "
            "keys (tether sets TTLs on them, so volatile-* policies can evict them too), and an "
            "evicted checkpoint is lost. Set `maxmemory-policy noeviction` on the server "
            "(CONFIG SET maxmemory-policy noeviction, and in redis.conf), use a tiered store "
            "(Redis in front of SQL), or pass allow_eviction=True (URL ?allow_eviction=1) to "
            "accept the risk"
        )
        if not self.allow_eviction:
            raise ConfigError(message)
        logger.warning("%s (allowed: allow_eviction=True)", message)

    def _where(self) -> str:
        kwargs = getattr(self._r.connection_pool, "connection_kwargs", {})
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"

    async def aclose(self) -> None:
        if self._owns_client:
            with self._errors():
                await self._r.aclose()

    # -- writes ---------------------------------------------------------------------
    def _write_args(self, w: Write, mode: str, expected: int | None) -> list[Any]:
        tail = f"{w.status}|{w.created_at!r}|{_node_text(w.node_id)}"
        return [
            mode,
            w.run_id,
            "" if expected is None else expected,
            "" if w.require_status is None else str(w.require_status),
            w.kind,
            w.payload,
            tail,
            str(w.status),
            "0" if w.node_id is None else "1",
            w.node_id or "",
            repr(w.created_at),
            _ms(w.expires_at),
            "" if w.expires_at is None else repr(w.expires_at),
            w.growth_bytes,
            w.rewrite_bytes,
            "1" if self._indexed else "0",
            w.seal_from or "",
        ]

    async def _write(self, w: Write) -> tuple[int, ChainStats]:
        args = [*self._write_args(w, "write", w.expected_version), w.write_id]
        with self._errors():
            reply = await self._s_write(keys=self._all_keys(w.run_id), args=args)
        tag = bytes(reply[0])
        if tag == b"conflict":
            if int(reply[1]) == 0 and w.expected_version:
                raise RunNotFound(w.run_id)  # its keys are gone: expired (Redis TTL) or deleted
            raise VersionConflict(w.run_id, expected=w.expected_version, actual=int(reply[1]))
        if tag == b"status":
            raise RunNotPaused(w.run_id, bytes(reply[1]).decode())
        if tag == b"missing":
            raise RunNotFound(w.run_id)
        if tag == b"stale":
            raise StaleSeal(w.run_id)
        version, chain = int(reply[1]), _chain(reply[2:7])
        self._hint(w.run_id, (chain.base_version, version, _versions(reply[7])) if reply[7] else None)
        return version, chain

    async def _set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        args = _status_args(run_id, status, time.time(), expires_at, self._indexed, "set")
        with self._errors():
            done = await self._s_status(keys=self._all_keys(run_id), args=args)
        if not done:
            raise RunNotFound(run_id)

    @retried
    async def delete(self, run_id: str) -> bool:
        self._hint(run_id, None)
        with self._errors():
            existed = await self._s_delete(keys=self._all_keys(run_id), args=[run_id, "delete"])
        return bool(existed)

    async def _rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        self._hint(run_id, None)
        with self._errors():
            dropped = int(await self._s_rebase(keys=self._keys(run_id), args=[version, payload, after]))
        if dropped == -1:
            raise RunNotFound(run_id)
        if dropped == -2:
            raise RunNotFound(run_id, version)
        return dropped

    # -- the cache side of TieredStore ------------------------------------------------
    # A tiered writer calls _begin (a lease: readers stop trusting the copy), commits to
    # SQL, then _mirror/_mirror_status/_invalidate, which release the lease. A crash in
    # between leaves the lease: the copy stays untrusted until it expires and a reader
    # refills it from SQL. Copies older than the server's last start are never trusted.
    async def _begin(self, run_id: str, token: str, deadline: float) -> None:
        keys = [self._keys(run_id)[0], self._all_keys(run_id)[5]]
        with self._errors():
            await self._s_begin(keys=keys, args=[token, _ms(deadline)])

    async def _mirror(self, w: Write, version: int, chain: ChainStats, token: str) -> bool:
        """Append a row SQL committed as ``version``; drop the copy unless it is at v - 1."""
        args = [*self._write_args(w, "mirror", version - 1), token, chain.base_version]
        args += [chain.base_bytes, chain.growth_bytes, chain.rewrite_bytes, chain.length, w.write_id]
        with self._errors():
            reply = await self._s_write(keys=self._all_keys(w.run_id), args=args)
        if bytes(reply[0]) != b"ok":
            self._hint(w.run_id, None)
            return False
        self._hint(w.run_id, (chain.base_version, version, _versions(reply[7])))
        return True

    async def _mirror_status(self, info: RunInfo, token: str) -> bool:
        """Copy the run record after a status change; drop a copy not at ``info.version``."""
        expires = None if info.expires_at is None else info.expires_at.timestamp()
        now = info.updated_at.timestamp()
        args = _status_args(info.run_id, info.status, now, expires, False, "mirror")
        with self._errors():
            done = await self._s_status(keys=self._all_keys(info.run_id), args=[*args, info.version, token])
        return bool(done)

    async def _invalidate(self, run_id: str, token: str | None = None, *, keep: int | None = None) -> None:
        """Release ``token`` and drop the copy (unless it is at version ``keep``)."""
        args = [run_id, "invalidate", token or "", "" if keep is None else keep]
        with self._errors():
            await self._s_delete(keys=self._all_keys(run_id), args=args)

    async def _warm(self, info: RunInfo, rows: Sequence[StoredRow], token: bytes) -> bool:
        """Refill the copy from SQL rows, unless a writer touched the run since ``token``.

        ``token`` is the fence value :meth:`_fetch` returned with the miss; every
        writer bumps it before its SQL commit, so data read before a commit never lands.
        """
        fields = _hash_fields(info)
        expires = None if info.expires_at is None else info.expires_at.timestamp()
        fields += ["carriers", ",".join(str(row.version) for row in rows if row.payload)]
        args: list[Any] = [token, _ms(time.time()), _ms(expires), len(fields) // 2, *fields]
        for row in rows:
            args += [row.version, _member(row), row.payload, "1" if row.kind == "full" else "0"]
        keys = [*self._keys(info.run_id), self._all_keys(info.run_id)[5]]
        with self._errors():
            return bool(await self._s_warm(keys=keys, args=args))

    # -- reads ----------------------------------------------------------------------
    async def _fetch(
        self, run_id: str, version: int | None, *, tiered: bool = False, record: bool = False
    ) -> tuple[RunInfo | None, list[StoredRow], bytes]:
        """The run, the rows for ``version``, and the fence value on a miss.

        One round trip, or two for chains over ``INLINE_BYTES`` (their payloads then come
        by plain HMGET). ``record`` reads the run record only; ``tiered`` treats
        untrusted copies as misses. Reads are idempotent, so a dropped connection is
        retried once.
        """
        keys = [*self._keys(run_id), self._all_keys(run_id)[5]]
        flags = ["1" if tiered else "0", "1" if record else "0"]
        for attempt in range(3):
            limit = INLINE_BYTES if attempt < 2 else ""
            args = ["" if version is None else version, *flags, limit]
            try:
                with self._errors():
                    reply = await self._s_read(keys=keys, args=args)
            except StoreUnavailable:  # a pooled connection died (server restart): once more
                with self._errors():
                    reply = await self._s_read(keys=keys, args=args)
            if not int(reply[0]):
                return None, [], bytes(reply[1])
            fields = _pairs(reply[1])
            info = _run_info(run_id, fields)
            if len(reply) > 5 and not tiered:  # a row of the chain is gone, its run is not
                gone = int(reply[5])
                raise CheckpointCorrupt(
                    f"the row of version {gone} is missing from Redis while its run is stored "
                    "(evicted under memory pressure, or deleted by hand?); set maxmemory-policy "
                    "noeviction, and restore the run from a copy or roll back past it",
                    run_id=run_id,
                    version=gone,
                )
            payloads = reply[3]
            if reply[2] and not int(reply[4]):
                payloads = await self._payloads(run_id, reply[2], fields[b"created_at"])
                if payloads is None:
                    continue  # the run changed between the two round trips
            rows = [_row(run_id, m, p) for m, p in zip(reply[2], payloads, strict=True)]
            target = info.version if version is None else version
            if rows and rows[-1].version != target:
                rows = []
            return info, rows, b""
        raise AssertionError("unreachable: the last attempt reads inline")

    async def _payloads(self, run_id: str, members: list[bytes], created_at: bytes) -> list[bytes] | None:
        """Payloads of a big chain; None if a row went or the run was re-created meanwhile."""
        run_key, rows_key, _, _ = self._keys(run_id)
        versions = [m.split(b"|", 1)[0] for m in members]
        with self._errors():
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.hmget(rows_key, versions)
                pipe.hget(run_key, "created_at")
                payloads, now_created = await pipe.execute()
        if now_created != created_at or any(p is None for p in payloads):
            return None
        return list(payloads)

    async def _read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        if version is None:
            chain = await self._latest_chain(run_id, tiered=False)
            if chain is not None:
                return chain
        return await super()._read_chain(run_id, version)

    async def _latest_chain(self, run_id: str, *, tiered: bool) -> list[tuple[int, bytes]] | None:
        """The latest chain's ``(version, payload)`` rows (a sealed latest version last, with
        an empty payload), [] for no run, None when the full read path must decide (a
        tiered copy not trusted, a row missing, a run changed between two round trips).

        With a hint from this store's last write or read of the run: one HMGET (see
        :func:`_present` for why its answer proves it is the latest chain), sent in a
        tiered store together with the script that checks the copy is trusted.
        Otherwise the ``_CHAIN`` script, then the HMGET if the chain is big.
        """
        hint = self._hints.get(run_id)
        if hint is not None:
            chain = await (self._rows_trusted(run_id, *hint) if tiered else self._rows(run_id, *hint))
            if chain is not None:
                return chain
        run_key, rows_key = self._keys(run_id)[:2]
        mode = "1" if tiered else "0"
        (reply,) = await self._send_chain(
            ("EVALSHA", self._s_chain.sha, 2, run_key, rows_key, mode, CHAIN_INLINE_BYTES)
        )
        tag = int(reply[0])
        if tag != 1:
            return [] if tag == 0 and not tiered else None
        latest, base, carriers = int(reply[1]), int(reply[2]), _versions(reply[3])
        if len(reply) > 4:
            payloads = reply[4:]
            if len(payloads) != len(carriers) or not all(payloads):
                return None
            chain = list(zip(carriers, payloads, strict=True))
            if carriers[-1] != latest:
                chain.append((latest, b""))
        else:
            chain = await self._rows(run_id, base, latest, carriers)
        if chain is not None:
            self._hint(run_id, (base, latest, carriers))
        return chain

    async def _rows_trusted(
        self, run_id: str, base: int, latest: int, carriers: tuple[int, ...]
    ) -> list[tuple[int, bytes]] | None:
        """:meth:`_rows` and the tiered trust check in one round trip."""
        run_key, rows_key = self._keys(run_id)[:2]
        check = ("EVALSHA", self._s_chain.sha, 2, run_key, rows_key, "1", 0)
        trusted, got = await self._send_chain(check, _hmget_rows(rows_key, _fetched(latest, carriers)))
        if trusted[:3] != [1, latest, base]:
            return None
        return _present(base, latest, carriers, got)

    async def _send(self, *commands: tuple[Any, ...] | bytes) -> list[Any]:
        """Several commands in one round trip on one pooled connection. (redis-py's
        ``Pipeline`` costs ~60 us a call in bookkeeping, as much as a round trip here.)
        A command may come packed already (see :func:`_hmget_rows`)."""
        pool = self._r.connection_pool
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

    async def _send_chain(self, *commands: tuple[Any, ...] | bytes) -> list[Any]:
        """:meth:`_send` of commands that may run the ``_CHAIN`` script by its hash."""
        with self._errors():
            try:
                return await self._send(*commands)
            except rexc.NoScriptError:  # a restarted server: load the script, ask once more
                await self._r.script_load(self._s_chain.script)
                return await self._send(*commands)

    async def _rows(
        self, run_id: str, base: int, latest: int, carriers: tuple[int, ...]
    ) -> list[tuple[int, bytes]] | None:
        """The chain's rows if they are the latest chain (see :func:`_present`), else None."""
        with self._errors():
            (got,) = await self._send(_hmget_rows(self._keys(run_id)[1], _fetched(latest, carriers)))
        return _present(base, latest, carriers, got)

    def _hint(self, run_id: str, chain: tuple[int, int, tuple[int, ...]] | None) -> None:
        _hint(self._hints, run_id, chain)

    async def _read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        info, rows, _ = await self._fetch(run_id, version)
        return info, rows

    async def _history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        if limit == 0:
            return []
        run_key, _, hist_key, _ = self._keys(run_id)
        top = "+inf" if before is None else f"({before}"
        with self._errors():
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.exists(run_key)
                pipe.zrevrangebyscore(hist_key, top, "-inf", start=0, num=limit or -1)
                exists, members = await pipe.execute()
        if not exists:
            return []
        return [_checkpoint_info(run_id, m) for m in members]

    @retried
    async def get_run(self, run_id: str) -> RunInfo | None:
        info, _, _ = await self._fetch(run_id, None, record=True)
        return info

    @retried
    async def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunInfo]:
        if limit <= 0:
            return []
        want = None if status is None else RunStatus(status)
        found: list[RunInfo] = []
        stale: list[str] = []
        start, batch = 0, max(offset + limit, 50)
        with self._errors():
            while len(found) < offset + limit:
                ids: list[bytes] = await self._r.zrevrange(  # type: ignore[assignment]
                    self._index_key, start, start + batch - 1
                )
                if not ids:
                    break
                async with self._r.pipeline(transaction=False) as pipe:
                    for rid in ids:
                        pipe.hgetall(self._keys(rid.decode())[0])
                    hashes = await pipe.execute()
                for rid, h in zip(ids, hashes, strict=True):
                    if b"version" not in h:
                        stale.append(rid.decode())
                    elif want is None or h.get(b"status") == want.encode():
                        found.append(_run_info(rid.decode(), h))
                start, batch = start + batch, batch * 2
            if stale:
                await self._unindex(stale)
        return found[offset : offset + limit]

    async def _unindex(self, run_ids: list[str]) -> int:
        keys = [self._index_key, *(self._keys(rid)[0] for rid in run_ids)]
        return int(await self._s_unindex(keys=keys, args=run_ids))

    @retried
    async def purge_expired(self) -> int:
        """Redis expires the runs itself; this sweeps their ids out of the run index."""
        removed = 0
        batch: list[str] = []
        with self._errors():
            async for member, _score in self._r.zscan_iter(self._index_key, count=500):
                batch.append(member.decode())
                if len(batch) >= 500:
                    removed += await self._unindex(batch)
                    batch = []
            if batch:
                removed += await self._unindex(batch)
        if removed:
            logger.info("redis: removed %d expired runs from the index", removed)
        return removed


# -- encoding helpers -------------------------------------------------------------------
_NOT_WRITABLE = {
    "OOM": ("out of memory", "raise maxmemory, or free memory on the server"),
    "READONLY": ("read-only", "point the store at the primary, not a replica"),
    "MISCONF": ("cannot persist", "the server cannot write its snapshot to disk: free disk space"),
}


def _translate(exc: Exception) -> StoreError:
    """A Redis error reply as the store error for its cause (by its first word)."""
    word = str(exc).split(" ", 1)[0]
    if word in _NOT_WRITABLE:
        reason, fix = _NOT_WRITABLE[word]
        return StoreNotWritable(f"redis: {exc} ({fix}; then resume the run)", reason=reason)
    if "max bulk length" in str(exc) or "invalid bulk length" in str(exc):
        return StateTooLarge(
            f"redis: {exc}: a checkpoint is over the server's proto-max-bulk-len; raise it, "
            "or keep big data out of the state"
        )
    return StoreError(f"redis: {exc}")


def _status_args(
    run_id: str, status: RunStatus, now: float, expires_at: float | None, indexed: bool, mode: str
) -> list[Any]:
    exp = "" if expires_at is None else repr(expires_at)
    return [str(status), repr(now), _ms(expires_at), exp, run_id, "1" if indexed else "0", mode]


def _ms(ts: float | None) -> str:
    return "" if ts is None else str(math.ceil(ts * 1000))


def _node_text(node_id: str | None) -> str:
    return "-" if node_id is None else "+" + node_id


def _member(row: StoredRow) -> str:
    node = _node_text(row.node_id)
    return f"{row.version}|{row.kind}|{len(row.payload)}|{row.status}|{row.created_at!r}|{node}"


def _parse_member(run_id: str, member: bytes) -> tuple[int, str, int, RunStatus, float, str | None]:
    """``(version, kind, size, status, created_at, node_id)`` of a ``hist`` member."""
    try:
        v, kind, size, status, created, node = member.decode().split("|", 5)
        return int(v), kind, int(size), RunStatus(status), float(created), node[1:] if node != "-" else None
    except ValueError as exc:
        raise CheckpointCorrupt(f"bad history entry {member[:80]!r}", run_id=run_id) from exc


def _row(run_id: str, member: bytes, payload: bytes) -> StoredRow:
    v, kind, _size, status, created, node = _parse_member(run_id, member)
    return StoredRow(run_id, v, kind, node, status, created, payload)


def _checkpoint_info(run_id: str, member: bytes) -> CheckpointInfo:
    v, kind, size, status, created, node = _parse_member(run_id, member)
    return CheckpointInfo(
        run_id=run_id, version=v, node_id=node, status=status, timestamp=_utc(created), kind=kind, size=size
    )


def _versions(carriers: bytes) -> tuple[int, ...]:
    """The run record's ``carriers`` field (b"1,9,41") as versions."""
    return tuple(map(int, carriers.split(b",")))


def _fetched(latest: int, carriers: tuple[int, ...]) -> list[int]:
    """What :func:`_present` reads: the carriers, the latest version when it is sealed (so
    it must be there), and the next one (which must not)."""
    return [*carriers, latest, latest + 1] if carriers[-1] != latest else [*carriers, latest + 1]


def _hmget_rows(rows_key: str, versions: Sequence[int]) -> bytes:
    """``HMGET rows_key _base versions...`` (what :func:`_present` reads), packed here: a
    1,000-row chain was a 1,004-argument command, which redis-py's general packer took
    0.44 ms to pack and this 0.14 ms (a throwaway script), of a ~12 ms load."""
    key = rows_key.encode()
    head = b"*%d\r\n$5\r\nHMGET\r\n$%d\r\n%s\r\n$5\r\n_base\r\n" % (len(versions) + 3, len(key), key)
    return head + b"".join([b"$%d\r\n%d\r\n" % (len(str(v)), v) for v in versions])


def _present(
    base: int, latest: int, carriers: tuple[int, ...], got: Sequence[Any]
) -> list[tuple[int, bytes]] | None:
    """The chain from an HMGET of ``_base`` and :func:`_fetched`, if it proves to be the
    latest: ``_base`` (the current chain's full row, kept in the rows hash by every script
    that moves it) is ``base``, every carrier holds a payload, the latest version is there
    and the next one is not. (Every write sets the row of its version, a sealed one too;
    a seal or a prune changes no carrier without a new version or a new base.)"""
    n = len(carriers)
    if got[0] is None or int(got[0]) != base or got[-1] is not None:
        return None
    payloads = got[1 : n + 1]
    if not all(payloads):
        return None
    chain = list(zip(carriers, payloads, strict=True))
    if carriers[-1] != latest:
        if got[n + 1] is None:
            return None
        chain.append((latest, b""))
    return chain


def _pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _chain(values: Sequence[Any]) -> ChainStats:
    bv, bb, gb, rb, length = (int(x) for x in values)
    return _chain_stats(bv, bb, gb, rb, length)


def _run_info(run_id: str, h: dict[bytes, bytes]) -> RunInfo:
    try:
        node, exp = h.get(b"node_id"), h.get(b"expires_at")
        return RunInfo(
            run_id=run_id,
            status=RunStatus(h[b"status"].decode()),
            version=int(h[b"version"]),
            node_id=None if node is None else node.decode(),
            created_at=_utc(float(h[b"created_at"])),
            updated_at=_utc(float(h[b"updated_at"])),
            expires_at=None if exp is None else _utc(float(exp)),
            chain=_chain([h[f.encode()] for f in _RUN_FIELDS[2:7]]),
        )
    except (KeyError, ValueError) as exc:
        raise CheckpointCorrupt(f"damaged run record ({exc})", run_id=run_id) from exc


def _hash_fields(info: RunInfo) -> list[Any]:
    c = info.chain
    fields: list[Any] = [
        "status",
        str(info.status),
        "version",
        info.version,
        "base_version",
        c.base_version,
        "base_bytes",
        c.base_bytes,
        "growth_bytes",
        c.growth_bytes,
        "rewrite_bytes",
        c.rewrite_bytes,
        "chain_len",
        c.length,
        "created_at",
        repr(info.created_at.timestamp()),
        "updated_at",
        repr(info.updated_at.timestamp()),
    ]
    if info.node_id is not None:
        fields += ["node_id", info.node_id]
    if info.expires_at is not None:
        fields += ["expires_at", repr(info.expires_at.timestamp())]
    return fields


def _pop_query(url: str, name: str) -> tuple[str, str | None]:
    """Remove ``name`` from the URL's query (redis-py would reject it); return its value."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    value = next((v for k, v in query if k == name), None)
    rest = urlencode([(k, v) for k, v in query if k != name])
    return urlunsplit(parts._replace(query=rest)), value
