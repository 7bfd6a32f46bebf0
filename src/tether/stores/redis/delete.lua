-- KEYS: run rows hist full index gen.  ARGV: run_id mode (delete|invalidate) token keep
-- delete: remove the run, 1 if it existed. invalidate (tiered): release ``token`` and
-- drop the copy unless it is at version ``keep``; fences out refills read before now.
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
