-- KEYS: run gen.  ARGV: token deadline_ms.  A tiered writer announces itself before its
-- SQL commit, so no reader trusts (or refills) the copy until the writer is done.
fence(KEYS[2])
redis.call('HSET', KEYS[1], 'lease:' .. ARGV[1], ARGV[2])
local info, leases = read_run(KEYS[1])
if not info['version'] then
  local last = 0
  for _, d in pairs(leases) do if d > last then last = d end end
  redis.call('PEXPIREAT', KEYS[1], last)
end
return 1
