-- KEYS: run rows hist full index gen
-- ARGV: status updated_at expires_ms expires_at run_id indexed mode; mirror: version token
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
redis.call('PUBLISH', string.sub(KEYS[5], 1, -5) .. 'changes', info['version'] .. ':' .. ARGV[5])  -- change feed
return 1
