-- KEYS: index, run keys...  ARGV: run ids.  Drops index entries whose run is gone.
local n = 0
for i = 1, #ARGV do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then n = n + redis.call('ZREM', KEYS[1], ARGV[i]) end
end
return n
