-- KEYS: run rows hist.  ARGV: expected version, then version payload pairs.  -> 1 done,
-- 0 the run is at another version (nothing changed), -1 no run, -2 - v: row v is missing.
-- Each row keeps its version, kind, status and time; its history entry gets the new size
-- (the new entry is added before the old one goes, so the key, and its TTL, never lapse).
local h = redis.call('HGET', KEYS[1], 'version')
if not h then return -1 end
if tonumber(h) ~= tonumber(ARGV[1]) then return 0 end
for i = 2, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 0 then return -2 - tonumber(ARGV[i]) end
end
for i = 2, #ARGV, 2 do
  local v, payload = tonumber(ARGV[i]), ARGV[i + 1]
  redis.call('HSET', KEYS[2], ARGV[i], payload)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], v, v)) do
    local kind, rest = string.match(m, '^%d+|(%a+)|%d+|(.*)$')
    local new = string.format('%d|%s|%d|', v, kind, #payload) .. rest
    if new ~= m then
      redis.call('ZADD', KEYS[3], v, new)
      redis.call('ZREM', KEYS[3], m)
    end
  end
end
return 1
