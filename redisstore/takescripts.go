package redisstore

import (
	"github.com/redis/go-redis/v9"
)

// The scripts of Take, TakeMany and Refund keep, at the key's ":t" key, the
// state of a key limited by several bucket shapes at once, packed as
// little-endian doubles:
//
//	gen, born, memo_at_s, memo_at_ns, memo_reserved_s, memo_reserved_ns, memo_gen,
//	tat_s, tat_ns (one pair per shape, in the order of the shapes)
//
// gen is the key's reorder count (driver.Receipt.Gen): it starts, for a new
// key, at a random number below 2^52 that the caller draws, kept as born,
// and grows by one for each refund that reorders; it stays far below 2^53,
// where a double is exact. The receipts of the key since it was created
// therefore hold a Gen in [born, gen]; one outside was taken before the key
// was last absent (full or deleted), and a refund of it gives nothing
// (unless the random starts of two lives of a key land within a few counts
// of each other: odds about k/2^52 for a key with k reorders). memo is the
// receipt (At, first Reserved, Gen) of the latest refund that reordered, so
// that a second refund of it gives nothing (what the table of buckets behind pace.Pace keeps per
// shard). Instants are (seconds, nanoseconds) pairs of Unix time, as in the
// bucket script.
//
// A key whose every arrival time is not after now is full, and full is
// absent: both scripts treat it so, and the key expires at its latest
// arrival time.

// luaPairs defines, over luaCarry, the arithmetic on (seconds, nanoseconds)
// pairs, each part an integer held exactly by a double, the nanoseconds in
// [0, 1e9), and the state's load and store.
const luaPairs = luaCarry + `
local function add(a_s, a_ns, b_s, b_ns) return carry(a_s + b_s, a_ns + b_ns) end
local function sub(a_s, a_ns, b_s, b_ns) return carry(a_s - b_s, a_ns - b_ns) end
local function later(a_s, a_ns, b_s, b_ns)
  if before(a_s, a_ns, b_s, b_ns) then return b_s, b_ns end
  return a_s, a_ns
end
local function earlier(a_s, a_ns, b_s, b_ns)
  if before(a_s, a_ns, b_s, b_ns) then return a_s, a_ns end
  return b_s, b_ns
end

-- A state is one flat array, as stored: st[1] the gen, st[2] born, st[3..7]
-- the remembered receipt (at_s, at_ns, reserved_s, reserved_ns, gen), and
-- shape i's arrival time at st[6 + 2i], st[7 + 2i].

-- load returns the state at key, or nil when the key is absent or full at
-- now.
local function load(key, now_s, now_ns)
  local v = redis.call('GET', key)
  if not v then return nil end
  local count = #v / 8
  local st = {struct.unpack('<' .. string.rep('d', count), v)}
  st[count + 1] = nil -- unpack's next position
  for i = 8, count, 2 do
    if before(now_s, now_ns, st[i], st[i + 1]) then return st end
  end
  return nil
end

-- store writes st at key to expire at its latest arrival time, or deletes
-- the key when that is not after now (every shape full).
local function store(key, st, now_s, now_ns)
  local last_s, last_ns = now_s, now_ns
  for i = 8, #st, 2 do
    last_s, last_ns = later(last_s, last_ns, st[i], st[i + 1])
  end
  if not before(now_s, now_ns, last_s, last_ns) then
    redis.call('DEL', key)
    return
  end
  local packed = struct.pack('<' .. string.rep('d', #st), unpack(st))
  redis.call('SET', key, packed, 'PXAT', pxat(last_s, last_ns))
end
`

// takeScript is driver.TakeAll on the state of every key of KEYS, one key
// after the other, at one reading of the clock: all of a key's shapes or
// none. A shape the key has no arrival time for is full.
//
// ARGV: n (shapes), then per shape interval (s, ns) and tolerance (s, ns),
// then the gen of a key created by this call, then [now (s, ns)].
// Returns now (s, ns), then per key: 1 when taken else 0, the key's gen
// before the take, and the n arrival times (s, ns) it had before the
// decision, from which the caller derives the grant (driver.TakeAll and
// driver.RemainingAll on the same numbers).
var takeScript = redis.NewScript(luaClock + luaPairs + `
local n = tonumber(ARGV[1])
local interval_s, interval_ns, tolerance_s, tolerance_ns = {}, {}, {}, {}
for i = 1, n do
  local a = 2 + 4 * (i - 1)
  interval_s[i], interval_ns[i] = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  tolerance_s[i], tolerance_ns[i] = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
end
local new_gen = tonumber(ARGV[2 + 4 * n])
local now_s, now_ns = now(3 + 4 * n)

local out = {now_s, now_ns}
local at = 2 -- where the reply of the next key starts: taken, gen, then its arrival times
local next_tat = {}
for k = 1, #KEYS do
  local st = load(KEYS[k], now_s, now_ns) or {new_gen, new_gen, 0, 0, 0, 0, 0}
  local taken = 1
  out[at + 1], out[at + 2] = 0, st[1]
  for i = 1, n do
    local tat_s, tat_ns = st[6 + 2 * i] or now_s, st[7 + 2 * i] or now_ns
    out[at + 1 + 2 * i], out[at + 2 + 2 * i] = tat_s, tat_ns
    -- driver.Shape.Take
    local base_s, base_ns = later(tat_s, tat_ns, now_s, now_ns)
    local ahead_s, ahead_ns = sub(base_s, base_ns, now_s, now_ns)
    local debt_s, debt_ns = add(ahead_s, ahead_ns, interval_s[i], interval_ns[i])
    if before(tolerance_s[i], tolerance_ns[i], debt_s, debt_ns) then
      taken = 0
    end
    next_tat[2 * i - 1], next_tat[2 * i] = add(base_s, base_ns, interval_s[i], interval_ns[i])
  end
  out[at + 1] = taken
  if taken == 1 then
    for i = 1, 2 * n do st[7 + i] = next_tat[i] end
    store(KEYS[k], st, now_s, now_ns)
  end
  at = at + 2 + 2 * n
end
return out
`)

// takeOneScript is takeScript for a single shape, the common case (what
// pace.Shared uses unless given more shapes), written for the server's time:
// the state is unpacked into named locals rather than a table, the
// arguments come packed in one string (five numbers parsed from text cost
// the server more than a sixth of the call), and a key that is fresh
// (absent or full) costs one command and one number of the reply. A fresh
// key's take is the same for every key of the call (a full bucket at now),
// so it is decided, and its state packed, once per call; on Redis 7.0 or
// later a SET with NX and GET creates an absent key and reads a present one
// in one command. A key that also holds arrival times of other shapes (its
// shapes changed) takes the general path, as in takeScript: they are kept,
// and count for when the key is full.
//
// ARGV: interval (s, ns), tolerance (s, ns) and the gen of a key created by
// this call, packed in one argument as "<ddddd" (see packOne), then
// [now (s, ns)]. Returns now (s, ns), then per key one number for a fresh
// key, 1 when taken else 0 (its gen is the one given, its arrival time now),
// or four for a live key: 3 when taken else 2, the key's gen, and the
// arrival time (s, ns) it had before the decision; all packed in one string
// as little-endian doubles (integers below 2^53, so exact): on Redis 7.0 a
// table of three integers costs the server about 0.45 µs more to reply than
// a string (it looks a table up for the fields of an error, a status and
// each RESP3 type before reading it as an array), about 6 % of the script's
// call on a fresh key, and the client parses a string for fewer allocations.
// The reply of one fresh key is packed without building its format (0.3 µs).
var takeOneScript = redis.NewScript(luaClock + luaCarry + takeOneBody)

// takeOneBody is the text of takeOneScript after the helpers.
const takeOneBody = `
local interval_s, interval_ns, tolerance_s, tolerance_ns, new_gen = struct.unpack('<ddddd', ARGV[1])
local now_s, now_ns = now(2)
local pack, unpack9 = struct.pack, struct.unpack

-- A fresh key takes from a full bucket: taken when one interval fits the
-- tolerance, kept (else deleted) when its arrival time is after now.
local fresh_s, fresh_ns = carry(now_s + interval_s, now_ns + interval_ns)
local fresh_taken = not before(tolerance_s, tolerance_ns, interval_s, interval_ns)
local fresh, fresh_px -- the state and expiry of a fresh key after its take, when kept
if fresh_taken and before(now_s, now_ns, fresh_s, fresh_ns) then
  fresh = pack('<ddddddddd', new_gen, new_gen, 0, 0, 0, 0, 0, fresh_s, fresh_ns)
  fresh_px = pxat(fresh_s, fresh_ns)
end
local create = fresh and (redis.REDIS_VERSION_NUM or 0) >= 0x070000

local out = {now_s, now_ns}
local at = 2 -- the reply's length so far
for k = 1, #KEYS do
  local key = KEYS[k]
  local v
  if create then
    v = redis.call('SET', key, fresh, 'PXAT', fresh_px, 'NX', 'GET')
  else
    v = redis.call('GET', key)
  end
  local gen, born, memo_at_s, memo_at_ns, memo_reserved_s, memo_reserved_ns, memo_gen, tat_s, tat_ns
  local st -- the state as one flat array, when the key holds other shapes too
  local live = false
  if v and #v == 72 then
    gen, born, memo_at_s, memo_at_ns, memo_reserved_s, memo_reserved_ns, memo_gen, tat_s, tat_ns =
      unpack9('<ddddddddd', v)
    live = before(now_s, now_ns, tat_s, tat_ns)
  elseif v then
    local count = #v / 8
    st = {struct.unpack('<' .. string.rep('d', count), v)}
    st[count + 1] = nil -- unpack's next position
    for i = 8, count, 2 do
      live = live or before(now_s, now_ns, st[i], st[i + 1])
    end
    gen, tat_s, tat_ns = st[1], st[8], st[9]
  end
  if not live then
    at = at + 1
    out[at] = 0
    if fresh_taken then
      out[at] = 1
      if not v and create then
        -- created by the SET above
      elseif fresh then
        redis.call('SET', key, fresh, 'PXAT', fresh_px)
      elseif v then
        redis.call('DEL', key)
      end
    end
  else
    out[at + 1], out[at + 2], out[at + 3], out[at + 4] = 2, gen, tat_s, tat_ns
    -- driver.Shape.Take
    local base_s, base_ns = tat_s, tat_ns
    if before(tat_s, tat_ns, now_s, now_ns) then base_s, base_ns = now_s, now_ns end
    local debt_s, debt_ns = carry(base_s - now_s + interval_s, base_ns - now_ns + interval_ns)
    if not before(tolerance_s, tolerance_ns, debt_s, debt_ns) then
      out[at + 1] = 3
      local next_s, next_ns = carry(base_s + interval_s, base_ns + interval_ns)
      local last_s, last_ns = next_s, next_ns -- when the key is full again
      local packed
      if st then
        st[8], st[9] = next_s, next_ns
        for i = 10, #st, 2 do
          if before(last_s, last_ns, st[i], st[i + 1]) then last_s, last_ns = st[i], st[i + 1] end
        end
        packed = pack('<' .. string.rep('d', #st), unpack(st))
      else
        packed = pack('<ddddddddd', gen, born, memo_at_s, memo_at_ns, memo_reserved_s, memo_reserved_ns, memo_gen,
          next_s, next_ns)
      end
      if before(now_s, now_ns, last_s, last_ns) then
        redis.call('SET', key, packed, 'PXAT', pxat(last_s, last_ns))
      else
        redis.call('DEL', key)
      end
    end
    at = at + 4
  end
end
if at == 3 then -- one fresh key, the most common reply, without building its format
  return pack('<ddd', out[1], out[2], out[3])
end
return pack('<' .. string.rep('d', at), unpack(out))
`

// refundScript is driver.RefundAll of one receipt on the state at KEYS[1],
// with the rule of the table of buckets behind pace.Pace: the refund is intact while the key's gen
// still equals the receipt's; one that reorders raises the gen and is
// remembered, so that a second refund of the same receipt gives nothing. An
// absent (or full) key, and a receipt from before the key was created, are
// left alone.
//
// ARGV: n (shapes), the receipt's At (s, ns) and Gen, then per shape
// interval (s, ns) and Reserved (s, ns), then [now (s, ns)].
// Returns 1 when the refund gave anything back, else 0.
var refundScript = redis.NewScript(luaClock + luaPairs + `
local n = tonumber(ARGV[1])
local taken_s, taken_ns, receipt_gen = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now_s, now_ns = now(5 + 4 * n)
local st = load(KEYS[1], now_s, now_ns)
if not st then return 0 end
if receipt_gen < st[2] or receipt_gen > st[1] then
  return 0 -- taken before the key was last absent
end
local intact = st[1] == receipt_gen
local first_reserved_s, first_reserved_ns = tonumber(ARGV[7]), tonumber(ARGV[8])
if not intact and st[3] == taken_s and st[4] == taken_ns
    and st[5] == first_reserved_s and st[6] == first_reserved_ns and st[7] == receipt_gen then
  return 0 -- given back already, through a copy of the receipt
end

for i = (#st - 7) / 2 + 1, n do -- a shape the key holds no arrival time for is full
  st[6 + 2 * i], st[7 + 2 * i] = now_s, now_ns
end
local gave, reordered = false, false
for i = 1, n do
  local a = 5 + 4 * (i - 1)
  local interval_s, interval_ns = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local reserved_s, reserved_ns = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local tat_s, tat_ns = st[6 + 2 * i], st[7 + 2 * i]
  -- driver.Shape.Refund
  local end_s, end_ns = add(taken_s, taken_ns, interval_s, interval_ns)
  local again = false
  if intact then
    again = before(tat_s, tat_ns, reserved_s, reserved_ns) and before(now_s, now_ns, reserved_s, reserved_ns)
    end_s, end_ns = reserved_s, reserved_ns
  end
  local give_s, give_ns = 0, 0
  if not again and before(now_s, now_ns, end_s, end_ns) then
    give_s, give_ns = earlier(interval_s, interval_ns, sub(end_s, end_ns, now_s, now_ns))
  end
  if give_s > 0 or give_ns > 0 then
    gave = true
    reordered = reordered or not intact or tat_s ~= reserved_s or tat_ns ~= reserved_ns
    local next_s, next_ns = sub(tat_s, tat_ns, give_s, give_ns)
    st[6 + 2 * i], st[7 + 2 * i] = later(next_s, next_ns, now_s, now_ns)
  end
end
if not gave then return 0 end
if reordered then
  st[1] = st[1] + 1
  st[3], st[4], st[5], st[6], st[7] = taken_s, taken_ns, first_reserved_s, first_reserved_ns, receipt_gen
end
store(KEYS[1], st, now_s, now_ns)
return 1
`)
