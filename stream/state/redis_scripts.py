"""The Lua scripts of the Redis store (``stream.state.redis_store``), kept apart from the
Python that calls them: each runs atomically in one pool's hash slot, and each checks every key
it will touch before it writes anything. The key layout and the meaning of the keys are in
``stream.state.redis_store``'s docstring.
"""

# KEYS: gen, ids, lb, done, wm, meta, ids:old, ids:epoch, done:old, chg (all in the pool's slot; player and
#       pending-round keys are built in the script from ARGV[9]/ARGV[10], which carry the same hash tag -- see the
#       module docstring)
# ARGV: 1 expected gen, 2 n_players, 3 expected ids epoch ('' = do not check the log), 4 n_done, 5 '1' = check
#       the offsets first (else ''), 6 n_offsets, 7 offsets blob (per topic/partition three strings: field, first
#       offset to check ('' = none), last offset), 8 meta JSON ("" = keep), 9 player key prefix, 10 pending-round
#       key prefix, 11 players blob, 12 the new ids' digests (16 bytes each, appended to ``:ids``), 13
#       done-rounds blob (two strings per round: its id, its escaped id), 14 seen_max_ids ('0' = unbounded; see
#       the module docstring; it bounds ``:done`` too), 15 expected length of ``:ids`` in bytes (with ARGV[3]), 16
#       the key format (stream.state.keys.KEY_FORMAT), 17 n_changes, 18 changes blob (two strings per player:
#       name, the explanation of their change, written to ``chg``). Blobs: all little-endian u32 lengths first,
#       then the bytes (players: four lengths per player -- escaped name, value, score text, name ('' when it is
#       the escaped name) -- then the four strings per player, players by ascending score: see
#       stream.state.commit_blob). One
#       argument instead of thousands: redis-py packs arguments one by one in Python, which cost ~80 ms for a
#       round of 3,000 players.
# Returns -1 (gen moved), -2 (another system), -3 (the ids log or an offset is not what the caller checked
# against), -4 (the pool's keys are in another key format), or {new gen, ids epoch}; an error reply starting
# with "MMRSTATE" when a key holds what this script cannot write over (nothing written).
# A blob of n strings (n little-endian u32 lengths, then the bytes) → a Lua list; both scripts use it.
ITEMS_LUA = """
local function items(b, n)
  local out = {}
  local p = 4 * n + 1
  local sub, u32 = string.sub, struct.unpack  -- upvalues, not two global look-ups per item
  for i = 1, n do
    local l = u32('<I4', b, 4 * i - 3)
    out[i] = sub(b, p, p + l - 1)
    p = p + l
  end
  return out
end
local function bad(key, what)
  return redis.error_reply('MMRSTATE ' .. key .. ' ' .. what .. ' (nothing written)')
end
local function is_count(v)
  return v == false or string.match(v, '^%d+$') ~= nil
end
-- --- open rounds: the pool's ZSET round id -> when its first result was saved (``:open``), named from its
-- ``:done`` key (same pool, same slot); a key of another type refuses the script before it writes
local function open_key(done)
  return string.sub(done, 1, -5) .. 'open'
end
local function check_open(done)
  local t = redis.call('TYPE', open_key(done))['ok']
  if t ~= 'none' and t ~= 'zset' then return bad(open_key(done), 'holds a ' .. t .. ', not a zset') end
  return nil
end
-- --- end of open rounds
-- round ids marked done: SADD to ``done``; once it holds ``cap`` ids (cap > 0) it becomes ``old`` (the
-- generation before is unlinked), as ``:ids`` rotates
-- and takes them out of the pool's open rounds (``open_key``)
local function mark_done(done, old, ids, cap)
  if #ids == 0 then return end
  for k = 1, #ids, 4000 do
    redis.call('SADD', done, unpack(ids, k, math.min(k + 3999, #ids)))
    redis.call('ZREM', open_key(done), unpack(ids, k, math.min(k + 3999, #ids)))
  end
  if cap > 0 and redis.call('SCARD', done) >= cap then
    redis.call('UNLINK', old)
    redis.call('RENAME', done, old)
  end
end
"""

COMMIT_LUA = ITEMS_LUA + """
-- every check first: a failing command would leave the writes before it applied
local kinds = {'string', 'string', 'zset', 'set', 'hash', 'hash', 'string', 'string', 'set', 'hash'}
for i = 1, 10 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= kinds[i] then return bad(KEYS[i], 'holds a ' .. t .. ', not a ' .. kinds[i]) end
end
local open_bad = check_open(KEYS[4])
if open_bad then return open_bad end
local graw = redis.call('GET', KEYS[1])
if not is_count(graw) then return bad(KEYS[1], 'is not a commit counter') end
local gen = graw or '0'
if gen ~= ARGV[1] then return -1 end
local eraw = redis.call('GET', KEYS[8])
if not is_count(eraw) then return bad(KEYS[8], 'is not a rotation counter') end
local cur = redis.call('HMGET', KEYS[6], 'system', 'params', 'keys')
local has_meta = cur[1] or cur[2] or cur[3]
if has_meta and cur[3] ~= ARGV[16] then return -4 end
local m = nil
if ARGV[8] ~= '' then
  m = cjson.decode(ARGV[8])
  if has_meta and (cur[1] ~= m['system'] or cur[2] ~= m['params']) then return -2 end
end
if ARGV[3] ~= '' then
  -- the caller's "not applied before" was answered from this prefix of the log: still all of it?
  if (eraw or '0') ~= ARGV[3] or redis.call('STRLEN', KEYS[2]) ~= tonumber(ARGV[15]) then return -3 end
end
local np = tonumber(ARGV[2])
local nd = tonumber(ARGV[4])
local offs = items(ARGV[7], 3 * tonumber(ARGV[6]))
local olds = {}
if #offs > 0 then
  local fields = {}
  for k = 1, #offs, 3 do fields[#fields + 1] = offs[k] end
  local v = redis.call('HMGET', KEYS[5], unpack(fields))
  for k = 1, #v do
    if v[k] and not tonumber(v[k]) then return bad(KEYS[5], 'field ' .. fields[k] .. ' is not an offset') end
    olds[k] = v[k] and tonumber(v[k])
  end
end
if ARGV[5] == '1' then
  -- optimistic commit (no read before it): refuse if any message was applied already
  for k = 1, #offs, 3 do
    local wm = olds[(k + 2) / 3]
    if offs[k + 1] ~= '' and wm and wm >= tonumber(offs[k + 1]) then return -3 end
  end
end
-- writes: none of them can fail past the checks above (MSET overwrites a key of any type; a player key is only ever
-- written here, under a name no other key can have)
local pkey = ARGV[9]
local blob = ARGV[11]
-- beliefs and leaderboard entries in bulk: one MSET and one ZADD per ~2,000 players instead of a
-- SET and a ZADD per player (each redis.call costs ~1-2 us of Lua/command dispatch). The loop keeps
-- its own counts and reuses its two tables (``#t`` is a search in Lua 5.1, a new table per chunk
-- is garbage): a quarter less of the loop's time, ~8 % of the script's, for a step of 50,000 players
-- (BENCHMARKS.md)
local sub, u32x4, call = string.sub, struct.unpack, redis.call
local kv, zs, n = {}, {}, 0
local pos = 16 * np + 1
for i = 1, np do
  local kl, vl, sl, nl = u32x4('<I4I4I4I4', blob, 16 * i - 15)
  local v = pos + kl
  local s = v + vl
  local e = s + sl
  local kname = sub(blob, pos, v - 1)
  kv[n + 1] = pkey .. kname
  kv[n + 2] = sub(blob, v, s - 1)
  zs[n + 1] = sub(blob, s, e - 1)
  if nl == 0 then zs[n + 2] = kname else zs[n + 2] = sub(blob, e, e + nl - 1) end
  pos = e + nl
  n = n + 2
  if n >= 4000 or i == np then  -- (entries past ``n`` are a chunk before's, never sent)
    call('MSET', unpack(kv, 1, n))
    call('ZADD', KEYS[3], unpack(zs, 1, n))
    n = 0
  end
end
local nc = tonumber(ARGV[17])
if nc > 0 then
  local ch = items(ARGV[18], 2 * nc)
  for i = 1, 2 * nc, 4000 do
    redis.call('HSET', KEYS[10], unpack(ch, i, math.min(i + 3999, 2 * nc)))
  end
end
local cap = tonumber(ARGV[14])
if #ARGV[12] > 0 then
  local len = redis.call('APPEND', KEYS[2], ARGV[12])
  if cap > 0 and len >= 16 * cap then
    redis.call('UNLINK', KEYS[7])
    redis.call('RENAME', KEYS[2], KEYS[7])
    redis.call('INCR', KEYS[8])
  end
end
local done = items(ARGV[13], 2 * nd)
local rids = {}
for k = 1, 2 * nd, 2 do
  redis.call('DEL', ARGV[10] .. done[k + 1])
  rids[#rids + 1] = done[k]
end
mark_done(KEYS[4], KEYS[9], rids, cap)
for k = 1, #offs, 3 do
  local old = olds[(k + 2) / 3]
  if not old or tonumber(offs[k + 2]) > old then redis.call('HSET', KEYS[5], offs[k], offs[k + 2]) end
end
if m and not has_meta then
  redis.call('HSET', KEYS[6], 'system', m['system'], 'params', m['params'], 'keys', ARGV[16])
end
return {redis.call('INCR', KEYS[1]), redis.call('GET', KEYS[8]) or '0'}
"""

# Close rounds without rating them: KEYS ``:done``, ``:done:old``; ARGV 1 seen_max_ids (the bound of ``:done``,
# '0' = none), 2 the key prefix of the pool's pending rounds, then per round its id and its escaped id. Checked
# first. Returns {the earliest time left in the pool's open rounds ('' = none), then the ids of the rounds it
# closed: those not done before (a round a commit marked done meanwhile is only cleaned up)}.
EXPIRE_LUA = ITEMS_LUA + """
for i = 1, 2 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= 'set' then return bad(KEYS[i], 'holds a ' .. t .. ', not a set') end
end
local open_bad = check_open(KEYS[1])
if open_bad then return open_bad end
local rids = {}
local out = {''}
for k = 3, #ARGV, 2 do
  if redis.call('SISMEMBER', KEYS[1], ARGV[k]) == 0 and redis.call('SISMEMBER', KEYS[2], ARGV[k]) == 0 then
    out[#out + 1] = ARGV[k]
  end
  redis.call('DEL', ARGV[2] .. ARGV[k + 1])
  rids[#rids + 1] = ARGV[k]
end
mark_done(KEYS[1], KEYS[2], rids, tonumber(ARGV[1]))
local first = redis.call('ZRANGE', open_key(KEYS[1]), 0, 0, 'WITHSCORES')
if #first > 0 then out[1] = first[2] end
return out
"""

# A pool written before names were escaped, whose own name needs no escaping (so its hash tag is
# unchanged): KEYS its meta; ARGV 1 the key format, 2 n, 3 blob of three strings per key to move (old
# name, new name, the type it must hold), 4 a key prefix of the pool for the keys in transit. A no-op
# once the meta holds a key format (another worker migrated the pool; its later writes are in the new
# format). Two passes, because one name's new key can be another name's old key (player ``a:b`` goes
# to ``p:a%3Ab``, the old key of player ``a%3Ab``): every old key is moved aside first.
MIGRATE_LUA = ITEMS_LUA + """
if redis.call('HEXISTS', KEYS[1], 'keys') == 1 then return -1 end
local it = items(ARGV[3], 3 * tonumber(ARGV[2]))
local aside = {}
for k = 1, #it, 3 do
  if redis.call('TYPE', it[k])['ok'] == it[k + 2] then
    local tmp = ARGV[4] .. k
    redis.call('RENAME', it[k], tmp)
    aside[#aside + 1] = {tmp, it[k + 1]}
  end
end
local moved = 0
for _, m in ipairs(aside) do
  if redis.call('EXISTS', m[2]) == 0 then
    redis.call('RENAME', m[1], m[2])
    moved = moved + 1
  end
end
redis.call('HSET', KEYS[1], 'keys', ARGV[1])
return moved
"""


# The read half of a batch, atomically and with one argument per list (see COMMIT_LUA on why
# blobs): KEYS gen, ids, wm, ids:old, ids:epoch; ARGV 1 player key prefix, 2 the ids epoch the caller's
# index holds ('' = none), 3 the length of ``:ids`` it holds, 4 n_players, 5 blob of the players' escaped
# names, 6 n_wm, 7 blob
# of watermark fields ("topic/partition").
# Returns {gen, ids epoch, 1 = both generations in full (else the tail only), the bytes of ``:ids`` from the
# caller's length on (or all of it), all of ``:ids:old`` (or ''), beliefs (false = none), watermarks (false =
# none)}.
SNAPSHOT_LUA = ITEMS_LUA + """
local gen = redis.call('GET', KEYS[1]) or '0'
local ep = redis.call('GET', KEYS[5]) or '0'
local len = redis.call('STRLEN', KEYS[2])
local from = tonumber(ARGV[3])
local full, cur, old = 0, '', ''
if ep == ARGV[2] and from <= len then
  if from < len then cur = redis.call('GETRANGE', KEYS[2], from, len - 1) end
else
  full = 1
  cur = redis.call('GET', KEYS[2]) or ''
  old = redis.call('GET', KEYS[4]) or ''
end
local np = tonumber(ARGV[4])
local names = items(ARGV[5], np)
local pkey = ARGV[1]
local vals = {}
local i = 0
while i < np do
  local j = math.min(i + 4000, np)
  local keys = {}
  for k = i + 1, j do keys[#keys + 1] = pkey .. names[k] end
  local v = redis.call('MGET', unpack(keys))
  for k = 1, #keys do vals[#vals + 1] = v[k] end
  i = j
end
local nw = tonumber(ARGV[6])
local wms = {}
if nw > 0 then wms = redis.call('HMGET', KEYS[3], unpack(items(ARGV[7], nw))) end
return {gen, ep, full, cur, old, vals, wms}
"""


# A pool whose own name needs escaping, written before names were escaped, is copied from its old hash tag to
# its new one (another slot: stream.state.legacy_pools). RESTORE_LUA: KEYS the pool's new meta, then the new
# keys; ARGV one DUMP payload per new key. ADOPT_LUA: KEYS the new meta; ARGV its fields and values. Both are
# no-ops (-1) once the new meta exists: the pool was brought over (by another worker), and its new keys may
# have been written since.
RESTORE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
for i = 2, #KEYS do
  redis.call('RESTORE', KEYS[i], 0, ARGV[i - 1], 'REPLACE')
end
return #KEYS - 1
"""

ADOPT_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""
