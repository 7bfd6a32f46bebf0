-- KEYS: run.  ARGV: fence until mode (renew|mirror).  A lease holder's heartbeat: the
-- run's lease deadline moves to ``until`` only while ``fence`` is its current token.
-- A released lease (no deadline) is not renewed: a late heartbeat must not revive it.
-- -> {1} renewed, {0, current token} taken over or released, {-1} no run.
local h = redis.call('HMGET', KEYS[1], 'version', 'fence', 'lease_until')
if not h[1] then return {-1} end
if (h[2] or '0') ~= ARGV[1] or not h[3] then return {0, h[2] or '0'} end  -- taken, or released
redis.call('HSET', KEYS[1], 'lease_until', ARGV[2])
return {1}
