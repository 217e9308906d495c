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
// Lua number has changed between versions. pxat uses %d (a C long: 64 bits
// on the 64-bit builds Redis runs on), about five times cheaper on the
// server than %.0f for a 13-digit number.

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

// luaCarry defines the two helpers every script on (seconds, nanoseconds)
// pairs repeats: carry(s, ns) brings ns, anywhere in (-1e9, 2e9), into
// [0, 1e9), and before(a_s, a_ns, b_s, b_ns) reports whether instant a is
// before instant b. A call of a Lua local function costs about 60 ns inside
// EVALSHA on Redis 7.0 (a loop of 2e6 calls against the same arithmetic
// written inline): a few of them are about 1 % of a script call, so every
// repeated step is a helper.
const luaCarry = `
local function carry(s, ns)
  if ns >= 1e9 then return s + 1, ns - 1e9 end
  if ns < 0 then return s - 1, ns + 1e9 end
  return s, ns
end
local function before(a_s, a_ns, b_s, b_ns) return a_s < b_s or (a_s == b_s and a_ns < b_ns) end
`

// bucketScript is one GCRA step of driver.Shape.Take on the TAT stored at
// KEYS[1] as "<dd" (Unix seconds, nanoseconds). The key expires at the TAT,
// when the bucket is full again.
//
// ARGV: interval (s, ns), tolerance (s, ns), [now (s, ns)].
// Returns 0 when the take is admitted, else the wait in nanoseconds (an
// integer reply, or a decimal string when it is 2^53 ns or more).
var bucketScript = redis.NewScript(luaClock + luaCarry + `
local interval_s, interval_ns = tonumber(ARGV[1]), tonumber(ARGV[2])
local tolerance_s, tolerance_ns = tonumber(ARGV[3]), tonumber(ARGV[4])
local now_s, now_ns = now(5)

-- base is the later of the stored TAT and now.
local base_s, base_ns = now_s, now_ns
local v = redis.call('GET', KEYS[1])
if v then
  local tat_s, tat_ns = struct.unpack('<dd', v)
  if before(base_s, base_ns, tat_s, tat_ns) then base_s, base_ns = tat_s, tat_ns end
end
local debt_s, debt_ns = carry(base_s - now_s + interval_s, base_ns - now_ns + interval_ns)
if before(tolerance_s, tolerance_ns, debt_s, debt_ns) then
  local wait_s, wait_ns = carry(debt_s - tolerance_s, debt_ns - tolerance_ns)
  if wait_s < 9000000 then return wait_s * 1e9 + wait_ns end
  return string.format('%.0f%09.0f', wait_s, wait_ns)
end
if interval_s == 0 and interval_ns == 0 then return 0 end
local tat_s, tat_ns = carry(base_s + interval_s, base_ns + interval_ns)
redis.call('SET', KEYS[1], struct.pack('<dd', tat_s, tat_ns), 'PXAT', pxat(tat_s, tat_ns))
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

// luaElapsed defines elapsed(delta_s, delta_ns): the double nearest the
// interval of delta_s seconds and delta_ns nanoseconds (0 <= delta_ns < 1e9),
// saturated at 2^63 ns, which is what Go's float64(t.Sub(u)) gives. While
// delta_s*1953125 < 2^53 (below about 146 years) the product delta_s*1e9 is exact and the sum rounds once. Beyond,
// the product is split into two exact halves whose rounded sum's error is
// recovered exactly (Fast2Sum), so that the result is again a single
// rounding of the exact interval.
const luaElapsed = `
local function elapsed(delta_s, delta_ns)
  if delta_s < 4e9 then return delta_s * 1e9 + delta_ns end
  local high_s = math.floor(delta_s / 131072)
  local high, low = high_s * 1e9 * 131072, (delta_s - high_s * 131072) * 1e9
  local sum = high + low
  local err = low - (sum - high)
  return math.min(sum + (err + delta_ns), 9223372036854775808)
end
`

// burstScript runs pace.AdmitBurst, pace.ReleaseBurst or pace.RefreshBurst on
// the state at KEYS[1], stored as "<dddddddd":
//
//	count, remaining, last_s, last_ns, expiry_s, expiry_ns, sustained, budget
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
var burstScript = redis.NewScript(luaClock + luaCarry + luaElapsed + strings.NewReplacer(
	"REFILL_NS", strconv.FormatInt(int64(pace.BurstRefillWindow), 10),
	"KEEP_S", strconv.FormatInt(int64(2*pace.BurstRefillWindow/time.Second), 10),
	"KEEP_N", strconv.FormatInt(int64(2*pace.BurstRefillWindow%time.Second), 10),
).Replace(`
local refill_ns, keep_s, keep_ns = REFILL_NS, KEEP_S, KEEP_N
local op = ARGV[1]
local now_s, now_ns = now(7)
-- The state (BurstSlotState), as stored.
local count, remaining, last_s, last_ns, expiry_s, expiry_ns, sustained, budget

-- reclaim is BurstSlotState.ReclaimAt.
local function reclaim()
  local at_s, at_ns = last_s, last_ns
  if count > 0 and before(at_s, at_ns, expiry_s, expiry_ns) then at_s, at_ns = expiry_s, expiry_ns end
  if remaining < budget or count > sustained then
    at_s, at_ns = carry(at_s + keep_s, at_ns + keep_ns)
  end
  return at_s, at_ns
end

-- charge is chargeBurst: the time from last to (to_s, to_ns) at count.
local function charge(to_s, to_ns)
  if not before(last_s, last_ns, to_s, to_ns) then return end
  local delta = elapsed(carry(to_s - last_s, to_ns - last_ns))
  last_s, last_ns = to_s, to_ns
  if count > sustained and sustained > 0 then
    remaining = math.max(remaining - math.floor(delta * (count - sustained) / sustained), 0)
  else
    local refill = math.floor(delta * budget / refill_ns)
    if refill >= budget - remaining then remaining = budget else remaining = remaining + refill end
  end
end

-- assess is the assessment every pace burst function starts with
-- (assessBurst in burst.go), on a state known to exist.
local function assess()
  if count > 0 and not before(now_s, now_ns, expiry_s, expiry_ns) then
    charge(expiry_s, expiry_ns)
    count = 0
  end
  charge(now_s, now_ns)
end

local v = redis.call('GET', KEYS[1])
if v then
  count, remaining, last_s, last_ns, expiry_s, expiry_ns, sustained, budget = struct.unpack('<dddddddd', v)
  if not before(now_s, now_ns, reclaim()) then
    redis.call('DEL', KEYS[1])
    v = nil
  end
end

local result = 0
if op == 'a' then
  local new_sustained, ceiling, new_budget = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  if v then
    assess()
  else
    count, remaining, last_s, last_ns, expiry_s, expiry_ns = 0, new_budget, now_s, now_ns, 0, 0
  end
  sustained, budget = new_sustained, new_budget
  remaining = math.min(remaining, budget)
  if count >= ceiling or (count >= sustained and remaining <= 0) then
    result = -count - 1
  else
    count = count + 1
    expiry_s, expiry_ns = carry(now_s + tonumber(ARGV[5]), now_ns + tonumber(ARGV[6]))
    result = count
  end
elseif not v then
  return 0
elseif op == 'r' then
  assess()
  if count > 0 then count = count - 1 end
else
  assess()
  if count > 0 then expiry_s, expiry_ns = carry(now_s + tonumber(ARGV[5]), now_ns + tonumber(ARGV[6])) end
end

local reclaim_s, reclaim_ns = reclaim()
if not before(now_s, now_ns, reclaim_s, reclaim_ns) then
  redis.call('DEL', KEYS[1])
else
  local packed = struct.pack('<dddddddd', count, remaining, last_s, last_ns, expiry_s, expiry_ns, sustained, budget)
  redis.call('SET', KEYS[1], packed, 'PXAT', pxat(reclaim_s, reclaim_ns))
end
return result
`))
