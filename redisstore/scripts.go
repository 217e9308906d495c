package redisstore

import (
	"strconv"
	"strings"
	"time"

	"github.com/ratepace/pace"
	"github.com/redis/go-redis/v9"
)

// The scripts keep every absolute time as a pair (seconds, nanoseconds) of
// Unix time, each part an integer well inside the 2^53 range where a Lua 5.1
// number (an IEEE double) is exact, so that nanosecond arithmetic on
// instants near 1.7e18 ns stays exact. The clock is the server's TIME
// (microseconds) unless the last two arguments give (seconds, nanoseconds):
// only the package's tests do that, to replay a scenario against the Go
// reference functions.
//
// State is stored as little-endian IEEE doubles packed with the struct
// library that Redis bundles ("<dd" for a bucket, eight for a burst slot):
// lossless, and cheaper on the server than text. An expiry instant is
// formatted for PXAT by pxat, as an integer: how Redis would print a bare
// Lua number has changed between versions.

// luaClock is shared by the scripts: now(i) returns the decision instant
// from ARGV[i], ARGV[i+1] when the caller gave them, else from TIME; pxat
// returns the PXAT argument (Unix milliseconds, rounded up) of an instant.
const luaClock = `
local function now(i)
  if ARGV[i] then return tonumber(ARGV[i]), tonumber(ARGV[i + 1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]), tonumber(t[2]) * 1000
end
local function pxat(s, n)
  return string.format('%d', s * 1000 + math.ceil(n / 1e6))
end
`

// bucketScript is one GCRA step of pace.Bucket.Take on the TAT stored at
// KEYS[1] as "<dd" (Unix seconds, nanoseconds). The key expires at the TAT,
// when the bucket is full again.
//
// ARGV: interval (s, ns), tolerance (s, ns), [now (s, ns)].
// Returns 0 when the take is admitted, else the wait in nanoseconds (an
// integer reply, or a decimal string when it is 2^53 ns or more).
var bucketScript = redis.NewScript(luaClock + `
local is, in_ = tonumber(ARGV[1]), tonumber(ARGV[2])
local ts, tn = tonumber(ARGV[3]), tonumber(ARGV[4])
local ns, nn = now(5)
local bs, bn = ns, nn
local v = redis.call('GET', KEYS[1])
if v then
  local s, n = struct.unpack('<dd', v)
  if s > bs or (s == bs and n > bn) then bs, bn = s, n end
end
local ds, dn = bs - ns + is, bn - nn + in_
if dn >= 1e9 then dn = dn - 1e9; ds = ds + 1 elseif dn < 0 then dn = dn + 1e9; ds = ds - 1 end
if ds > ts or (ds == ts and dn > tn) then
  local ws, wn = ds - ts, dn - tn
  if wn < 0 then wn = wn + 1e9; ws = ws - 1 end
  if ws < 9000000 then return ws * 1e9 + wn end
  return string.format('%.0f%09.0f', ws, wn)
end
if is == 0 and in_ == 0 then return 0 end
local as, an = bs + is, bn + in_
if an >= 1e9 then an = an - 1e9; as = as + 1 end
redis.call('SET', KEYS[1], struct.pack('<dd', as, an), 'PXAT', pxat(as, an))
return 0
`)

// slotAcquireScript increments the plain counter at KEYS[1] unless it has
// reached ARGV[1], and sets its idle TTL to ARGV[2] milliseconds.
// Returns the new count when acquired, -(count+1) when refused.
var slotAcquireScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c >= tonumber(ARGV[1]) then return -c - 1 end
c = c + 1
redis.call('SET', KEYS[1], string.format('%d', c), 'PX', ARGV[2])
return c
`)

// slotReleaseScript decrements the plain counter at KEYS[1], keeping its TTL,
// and deletes it at zero.
var slotReleaseScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c > 1 then redis.call('DECR', KEYS[1]) elseif c > 0 then redis.call('DEL', KEYS[1]) end
return 0
`)

// deleteScript removes the keys of one user key in all namespaces. Its keys
// share one hash tag, so it is valid on Redis Cluster.
var deleteScript = redis.NewScript(`
redis.call('DEL', unpack(KEYS))
return 0
`)

// luaElapsed defines elapsed(ds, dn): the double nearest the interval of ds
// seconds and dn nanoseconds (0 <= dn < 1e9), saturated at 2^63 ns, which is
// what Go's float64(t.Sub(u)) gives. While ds*1953125 < 2^53 (ds below about
// 146 years) the product ds*1e9 is exact and the sum rounds once. Beyond,
// the product is split into two exact halves whose rounded sum's error is
// recovered exactly (Fast2Sum), so that the result is again a single
// rounding of the exact interval.
const luaElapsed = `
local function elapsed(ds, dn)
  if ds < 4e9 then return ds * 1e9 + dn end
  local h = math.floor(ds / 131072)
  local hp, lp = h * 1e9 * 131072, (ds - h * 131072) * 1e9
  local x = hp + lp
  local e = lp - (x - hp)
  return math.min(x + (e + dn), 9223372036854775808)
end
`

// burstScript runs pace.AdmitBurst, pace.ReleaseBurst or pace.RefreshBurst on
// the state at KEYS[1], stored as "<dddddddd":
//
//	count, remaining, lastS, lastN, expS, expN, sustained, budget
//
// (durations in nanoseconds, instants as Unix seconds and nanoseconds). A
// state whose ReclaimAt is not after now is treated as absent, and is
// deleted rather than written when an operation leaves it so; otherwise the
// key expires at its ReclaimAt.
//
// ARGV: op ("a" admit, "r" release, "f" refresh), sustained, ceiling,
// budget (ns), ttl (s, ns), [now (s, ns)].
// Returns, for "a", the new count when admitted and -(count+1) when refused;
// 0 otherwise.
//
// Each drain and refill is floor(a*b/c) on doubles, in the order of
// pace.mulDiv, with a the elapsed time as luaElapsed converts it.
var burstScript = redis.NewScript(luaClock + luaElapsed + strings.NewReplacer(
	"REFILL_NS", strconv.FormatInt(int64(pace.BurstRefillWindow), 10),
	"KEEP_S", strconv.FormatInt(int64(2*pace.BurstRefillWindow/time.Second), 10),
	"KEEP_N", strconv.FormatInt(int64(2*pace.BurstRefillWindow%time.Second), 10),
).Replace(`
local W, KS, KN = REFILL_NS, KEEP_S, KEEP_N
local op = ARGV[1]
local ns, nn = now(7)
local c, rem, ls, ln, es, en, sus, bud

-- Instants are (seconds, nanoseconds) pairs; comparisons and carries are
-- written out inline below, because a Lua function call costs more than
-- the arithmetic it would wrap.
local function norm(s, n)
  if n >= 1e9 then return s + 1, n - 1e9 end
  if n < 0 then return s - 1, n + 1e9 end
  return s, n
end

-- reclaim is BurstSlotState.ReclaimAt.
local function reclaim()
  local as, an = ls, ln
  if c > 0 and (as < es or (as == es and an < en)) then as, an = es, en end
  if rem < bud or c > sus then
    as, an = as + KS, an + KN
    if an >= 1e9 then as, an = as + 1, an - 1e9 end
  end
  return as, an
end

-- charge is chargeBurst: the time from (ls, ln) to (ts, tn) at count c.
local function charge(ts, tn)
  local ds, dn = ts - ls, tn - ln
  if dn < 0 then ds, dn = ds - 1, dn + 1e9 end
  if ds < 0 or (ds == 0 and dn == 0) then return end
  ls, ln = ts, tn
  local el = elapsed(ds, dn)
  if c > sus and sus > 0 then
    rem = math.max(rem - math.floor(el * (c - sus) / sus), 0)
  else
    local refill = math.floor(el * bud / W)
    if refill >= bud - rem then rem = bud else rem = rem + refill end
  end
end

-- assess is AssessBurst (on a state known to exist).
local function assess()
  if c > 0 and (ns > es or (ns == es and nn >= en)) then
    charge(es, en)
    c = 0
  end
  charge(ns, nn)
end

local v = redis.call('GET', KEYS[1])
if v then
  c, rem, ls, ln, es, en, sus, bud = struct.unpack('<dddddddd', v)
  local rs, rn = reclaim()
  if ns > rs or (ns == rs and nn >= rn) then
    redis.call('DEL', KEYS[1])
    v = nil
  end
end

local res = 0
if op == 'a' then
  local asus, ceil, abud = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  if v then
    assess()
  else
    c, rem, ls, ln, es, en = 0, abud, ns, nn, 0, 0
  end
  sus, bud = asus, abud
  rem = math.min(rem, bud)
  if c >= ceil or (c >= sus and rem <= 0) then
    res = -c - 1
  else
    c = c + 1
    es, en = norm(ns + tonumber(ARGV[5]), nn + tonumber(ARGV[6]))
    res = c
  end
elseif not v then
  return 0
elseif op == 'r' then
  assess()
  if c > 0 then c = c - 1 end
else
  assess()
  if c > 0 then es, en = norm(ns + tonumber(ARGV[5]), nn + tonumber(ARGV[6])) end
end

local rs, rn = reclaim()
if ns > rs or (ns == rs and nn >= rn) then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], struct.pack('<dddddddd', c, rem, ls, ln, es, en, sus, bud), 'PXAT', pxat(rs, rn))
end
return res
`))
