-- KEYS: run rows hist full gen.  ARGV: token now_ms expires_ms nfields field value...
-- then (version member payload is_full)...  Refills a tiered copy from SQL rows, unless
-- a writer began since the miss (``gen`` moved), one is still in flight, or another
-- reader already refilled it.
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
