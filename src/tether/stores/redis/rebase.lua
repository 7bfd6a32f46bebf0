-- KEYS: run rows hist full.  ARGV: version payload after.  -> dropped rows, -1 no run, -2
-- no row.  ``after`` (when not ''): the segment of the versions after ``version`` that the
-- one it was in held, for the row after it.
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
