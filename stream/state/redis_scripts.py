"""The Lua scripts of the Redis store (its key layout: ``stream.state.redis_store``'s docstring). Each
runs atomically in one pool's hash slot, and writes nothing before every key it will touch was checked
(by itself, or for a commit by the check that precedes its transaction).
"""

# A blob of n strings (n little-endian u32 lengths, then the bytes) → a Lua list; the scripts use it.
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
-- round ids marked done: SADD to ``done`` and out of the pool's open rounds; once ``done`` holds ``cap``
-- ids (cap > 0) it becomes ``old`` (the generation before is unlinked), as ``:ids`` rotates
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

# A commit is two scripts around the bulk writes (``RedisStore.commit``, the module docstring of
# stream.state.redis_store): the transaction applies against exactly what the check saw.
# KEYS (both): gen, ids, lb, done, wm, meta, ids:old, ids:epoch, done:old, chg, adv (all in the pool's slot)
# CHECK ARGV: 1 expected gen, 2 expected ids epoch ('' = do not check the log), 3 expected length of ``:ids``
#       in bytes (with ARGV[2]), 4 '1' = check the first offsets, 5 n_offsets, 6 offsets blob (per
#       topic/partition three strings: field, first offset to check ('' = none), last offset), 7 meta JSON
#       ("" = keep), 8 the key format (stream.state.keys.KEY_FORMAT).
# Returns 0 (go on), -1 (gen moved), -2 (another system), -3 (the ids log or an offset is not what the caller
# checked against), -4 (the pool's keys are in another key format); an error reply starting with "MMRSTATE"
# when a key holds what the commit cannot write over.
COMMIT_CHECK_LUA = ITEMS_LUA + """
local kinds = {'string', 'string', 'zset', 'set', 'hash', 'hash', 'string', 'string', 'set', 'hash', 'hash'}
for i = 1, 11 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= kinds[i] then return bad(KEYS[i], 'holds a ' .. t .. ', not a ' .. kinds[i]) end
end
local open_bad = check_open(KEYS[4])
if open_bad then return open_bad end
local graw = redis.call('GET', KEYS[1])
if not is_count(graw) then return bad(KEYS[1], 'is not a commit counter') end
if (graw or '0') ~= ARGV[1] then return -1 end
local eraw = redis.call('GET', KEYS[8])
if not is_count(eraw) then return bad(KEYS[8], 'is not a rotation counter') end
local cur = redis.call('HMGET', KEYS[6], 'system', 'params', 'keys')
local has_meta = cur[1] or cur[2] or cur[3]
if has_meta and cur[3] ~= ARGV[8] then return -4 end
if ARGV[7] ~= '' then
  local m = cjson.decode(ARGV[7])
  if has_meta and (cur[1] ~= m['system'] or cur[2] ~= m['params']) then return -2 end
end
if ARGV[2] ~= '' then
  -- the caller's "not applied before" was answered from this prefix of the log: still all of it?
  if (eraw or '0') ~= ARGV[2] or redis.call('STRLEN', KEYS[2]) ~= tonumber(ARGV[3]) then return -3 end
end
local offs = items(ARGV[6], 3 * tonumber(ARGV[5]))
if #offs > 0 then
  local fields = {}
  for k = 1, #offs, 3 do fields[#fields + 1] = offs[k] end
  local v = redis.call('HMGET', KEYS[5], unpack(fields))
  for k = 1, #v do
    if v[k] and not tonumber(v[k]) then return bad(KEYS[5], 'field ' .. fields[k] .. ' is not an offset') end
    -- optimistic commit (no read before it): refuse if any message was applied already
    local first = offs[3 * k - 1]
    if ARGV[4] == '1' and first ~= '' and v[k] and tonumber(v[k]) >= tonumber(first) then return -3 end
  end
end
return 0
"""

# APPLY ARGV: 1 n_done, 2 n_offsets, 3 offsets blob (as the check's), 4 meta JSON ("" = keep), 5 pending-round
# key prefix, 6 the new ids' digests (16 bytes each, appended to ``:ids``), 7 done-rounds blob (two strings per
# round: its id, its escaped id), 8 seen_max_ids ('0' = unbounded; see stream.state.redis_store's docstring; it
# bounds ``:done`` too), 9 the key format, 10 n_adv, 11 the learned side advantages the step changed (two strings
# per side: the side, its belief's bytes; HSET into ``:adv``). Every write but the bulk ones, none of which can
# fail past the check.
# Returns {new gen, ids epoch}.
COMMIT_APPLY_LUA = ITEMS_LUA + """
local cap = tonumber(ARGV[8])
if #ARGV[6] > 0 then
  local len = redis.call('APPEND', KEYS[2], ARGV[6])
  if cap > 0 and len >= 16 * cap then
    redis.call('UNLINK', KEYS[7])
    redis.call('RENAME', KEYS[2], KEYS[7])
    redis.call('INCR', KEYS[8])
  end
end
local done = items(ARGV[7], 2 * tonumber(ARGV[1]))
local rids = {}
for k = 1, #done, 2 do
  redis.call('DEL', ARGV[5] .. done[k + 1])
  rids[#rids + 1] = done[k]
end
mark_done(KEYS[4], KEYS[9], rids, cap)
local offs = items(ARGV[3], 3 * tonumber(ARGV[2]))
for k = 1, #offs, 3 do
  local old = redis.call('HGET', KEYS[5], offs[k])
  if not old or tonumber(offs[k + 2]) > tonumber(old) then redis.call('HSET', KEYS[5], offs[k], offs[k + 2]) end
end
local cur = redis.call('HMGET', KEYS[6], 'system', 'params', 'keys')
if ARGV[4] ~= '' and not (cur[1] or cur[2] or cur[3]) then
  local m = cjson.decode(ARGV[4])
  redis.call('HSET', KEYS[6], 'system', m['system'], 'params', m['params'], 'keys', ARGV[9])
end
local adv = items(ARGV[11], 2 * tonumber(ARGV[10]))
if #adv > 0 then redis.call('HSET', KEYS[11], unpack(adv)) end
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

# The values of the keys ``pkey .. name`` of ``names``, in order (false: none), by MGET of 4,000 at a time
# (``unpack`` of a longer list overflows Lua's C stack).
VALUES_LUA = """
local function values_of(pkey, names)
  local vals = {}
  local np = #names
  local i = 0
  while i < np do
    local j = math.min(i + 4000, np)
    local keys = {}
    for k = i + 1, j do keys[#keys + 1] = pkey .. names[k] end
    local v = redis.call('MGET', unpack(keys))
    for k = 1, #keys do vals[#vals + 1] = v[k] end
    i = j
  end
  return vals
end
"""


# The read half of a batch, atomically and with one argument per list (a Lua string per name rather than
# a Python object per argument in redis-py): KEYS gen, ids, wm, ids:old, ids:epoch, adv; ARGV 1 player key
# prefix, 2 the ids epoch the caller's index holds ('' = none), 3 the length of ``:ids`` it holds, 4 n_players,
# 5 blob of the players' escaped names, 6 n_wm, 7 blob of watermark fields ("topic/partition"), 8 '1' = read the
# learned side advantages (a step holding a sided event).
# Returns {gen, ids epoch, 1 = both generations in full (else the tail only), the bytes of ``:ids`` from the
# caller's length on (or all of it), all of ``:ids:old`` (or ''), beliefs (false = none), watermarks (false =
# none), ``:adv`` as a flat list of side and value (or false: not asked)}.
SNAPSHOT_LUA = ITEMS_LUA + VALUES_LUA + """
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
local vals = values_of(ARGV[1], items(ARGV[5], tonumber(ARGV[4])))
local nw = tonumber(ARGV[6])
local wms = {}
if nw > 0 then wms = redis.call('HMGET', KEYS[3], unpack(items(ARGV[7], nw))) end
local adv = false
if ARGV[8] == '1' then
  local t = redis.call('TYPE', KEYS[6])['ok']
  if t ~= 'none' and t ~= 'hash' then return redis.error_reply('WRONGTYPE ' .. KEYS[6] .. ' holds a ' .. t) end
  adv = redis.call('HGETALL', KEYS[6])
end
return {gen, ep, full, cur, old, vals, wms, adv}
"""


# The stored values of players of one pool. KEYS[1]: a key of the pool (its slot); ARGV: the players' key
# prefix, their count, their escaped names as one length-prefixed blob. Why a script rather than MGET: the
# names go as one argument, which redis-py sends as it is, where it packs each argument of an MGET in
# Python: on the event loop, for tens of thousands of players a step (BENCHMARKS.md, "Service").
BELIEFS_LUA = ITEMS_LUA + VALUES_LUA + """
return values_of(ARGV[1], items(ARGV[3], tonumber(ARGV[2])))
"""
