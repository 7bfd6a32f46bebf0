-- One save, atomically: check, append the row, update the run record, set the TTLs.
-- KEYS: run rows hist full index gen
-- ARGV (built by name in scripts.py, Scripts.write; the write id last: 21 in write mode,
--       27 in mirror mode)
--   1 mode (write|mirror) 2 run_id 3 expected ('' = any) 4 require_status 5 kind
--   6 payload 7 member tail 8 status 9 node_set 10 node 11 created_at 12 expires_ms
--   13 expires_at 14 growth 15 rewrite 16 indexed 17 seal_from (a segment write: the
--   payload goes to that row, which must hold a delta or a segment, no row up to the
--   new one may be full, and they become sealed) 18 fence (the writer's lease token, '0'
--   for none; mirror: the token SQL stored) 19 take ('1': store a new token) 20 lease
--   deadline ('' unchanged, '0' cleared); mirror: 21 token, 22..26 chain
local run, rows, hist, full = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mode = ARGV[1]
local info = {}  -- the record fields a write reads (a lease field matters only to a mirror's drop)
do
  local names = {'version', 'fence', 'wid', 'status', 'epoch', 'base_version', 'base_bytes',
    'growth_bytes', 'rewrite_bytes', 'chain_len', 'carriers'}
  local got = redis.call('HMGET', run, unpack(names))
  for i = 1, #names do
    if got[i] then info[names[i]] = got[i] end
  end
end
local current = tonumber(info['version']) or 0
local epoch = ''
local wid = ARGV[21] or ''
if mode == 'mirror' then wid = ARGV[27] or '' end
local token = info['fence'] or '0'
if mode ~= 'mirror' and wid ~= '' and info['wid'] == wid then
  -- this very write landed and its reply was lost: answer as the write did
  return {'ok', current, info['base_version'], info['base_bytes'], info['growth_bytes'],
    info['rewrite_bytes'], info['chain_len'], info['carriers'] or '', token}
end
if mode ~= 'mirror' and ARGV[18] ~= '0' and ARGV[19] ~= '1' and ARGV[18] ~= token then
  return {'fenced', token}  -- a holder whose lease was taken over: nothing is written
end
if mode == 'mirror' then
  redis.call('HDEL', run, 'lease:' .. ARGV[21])
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
  bv, bb, gb, rb, len = ARGV[22], ARGV[23], ARGV[24], ARGV[25], ARGV[26]
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
local record = {'version', v, 'status', ARGV[8], 'updated_at', ARGV[11],
  'base_version', bv, 'base_bytes', bb, 'growth_bytes', gb, 'rewrite_bytes', rb,
  'chain_len', len, 'epoch', epoch, 'carriers', cs, 'wid', wid}
local gone = {}
if ARGV[9] == '1' then record[#record + 1] = 'node_id'; record[#record + 1] = ARGV[10]
else gone[#gone + 1] = 'node_id' end
if ARGV[13] == '' then gone[#gone + 1] = 'expires_at'
else record[#record + 1] = 'expires_at'; record[#record + 1] = ARGV[13] end
if #gone > 0 then redis.call('HDEL', run, unpack(gone)) end
if mode == 'mirror' then
  if ARGV[18] ~= '0' then token = ARGV[18] end  -- the token SQL holds
elseif ARGV[19] == '1' then
  do  -- past every token before, also those a restart without persistence forgot
    local t = redis.call('TIME')
    local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    token = string.format('%.0f', math.max((tonumber(token) or 0) + 1, now_ms))
  end
end
record[#record + 1] = 'fence'
record[#record + 1] = token
redis.call('HSET', run, unpack(record))
if (ARGV[19] == '1' or ARGV[18] ~= '0') and ARGV[20] ~= '' then
  if ARGV[20] == '0' then redis.call('HDEL', run, 'lease_until')
  else redis.call('HSET', run, 'lease_until', ARGV[20]) end
end
set_ttl({run, rows, hist, full}, ARGV[12])
if ARGV[16] == '1' then redis.call('ZADD', KEYS[5], ARGV[11], ARGV[2]) end
redis.call('PUBLISH', string.sub(KEYS[5], 1, -5) .. 'changes', v .. ':' .. ARGV[2])  -- change feed
return {'ok', v, bv, bb, gb, rb, len, cs, token}
