-- KEYS: run rows hist full gen.  ARGV: version ('' = latest), tiered, record only,
-- inline limit.  -> {0, gen} on a miss, else {1, run fields, members, payloads, inline}.
-- In tiered mode a copy with a writer in flight, or from before the server's last
-- start, is a miss. Chains bigger than the limit come without payloads (inline = 0):
-- Lua copies every string it returns, which doubles the cost of a big read.
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
