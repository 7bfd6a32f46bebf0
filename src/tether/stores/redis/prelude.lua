-- Helpers every script but chain, rebase and unindex starts with (scripts.py prepends
-- this file). A run hash holds the run record and, in tiered mode, one ``lease:<token>``
-- field (value: deadline in ms) per writer in flight. scripts.py fills in the fence TTL.
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
