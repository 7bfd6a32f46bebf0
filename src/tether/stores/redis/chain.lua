-- KEYS: run rows.  ARGV: tiered ('1'|'0'), inline limit (bytes).  What ``load()`` needs
-- and nothing else: {1, latest, base, carriers, payload...} (the payloads of the rows listed
-- in carriers) for chains up to the limit, {1, latest, base, carriers} above it (the client
-- then fetches them by HMGET, skipping Lua's string copies), {0} for no run, {-1} for a
-- tiered copy not to be trusted.
local h = redis.call('HMGET', KEYS[1], 'version', 'base_version', 'base_bytes', 'growth_bytes',
  'rewrite_bytes', 'epoch', 'carriers')
if not h[1] then return {0} end
if ARGV[1] == '1' then  -- read-only, so no prelude: HSCAN finds leases without a Lua loop
  local cursor = '0'
  repeat
    local page = redis.call('HSCAN', KEYS[1], cursor, 'MATCH', 'lease:*', 'COUNT', 1000)
    if #page[2] > 0 then return {-1} end
    cursor = page[1]
  until cursor == '0'
  if h[6] ~= string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') then return {-1} end
end
local latest, base = tonumber(h[1]), tonumber(h[2])
local vs = {}
if h[7] then
  for c in string.gmatch(h[7], '%d+') do vs[#vs + 1] = c end
else  -- a chain written before carriers were recorded: every row since the base
  for i = base, latest do vs[#vs + 1] = i end
end
local out = {1, latest, base, table.concat(vs, ',')}
if tonumber(h[3]) + tonumber(h[4]) + tonumber(h[5]) > tonumber(ARGV[2]) then return out end
for i = 1, #vs, 1000 do  -- batches keep unpack() within Lua's stack
  local ps = redis.call('HMGET', KEYS[2], unpack(vs, i, math.min(i + 999, #vs)))
  for k = 1, #ps do out[#out + 1] = ps[k] end
end
return out
