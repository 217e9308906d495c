package httplimit

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

// kind is what a Limit counts with.
type kind uint8

const (
	kindPace kind = iota + 1
	kindBucket
	kindSlots
	kindShared
)

var kindNames = [...]string{kindPace: "pace", kindBucket: "bucket", kindSlots: "slots", kindShared: "shared"}

// Limit is one limit applied to every request that a Middleware (or a
// Limiter) decides: a Pace, a pace Shared by every replica through a Store,
// a token Bucket in a Store, or a count of concurrent Slots in a Store,
// each counted per key. Build it with Pace, Shared, Bucket or Slots; the
// zero Limit is rejected by New. A Limit is a small
// value, validated by New, and may be given to several Middlewares (they
// then share its pace or store). Within one Middleware, each Pace limit
// needs its own *pace.Pace: a Pace keeps one table of keys, so New rejects
// one *pace.Pace in two limits.
type Limit struct {
	kind     kind
	key      KeyFunc
	pace     *pace.Pace
	shared   *pace.Shared
	taker    driver.Taker // Bucket
	slotter  driver.Slots // Slots
	capacity float64      // Bucket
	refill   float64      // Bucket
	slots    int64        // Slots
	ttl      time.Duration
	opts     []Option
}

// Pace returns a Limit that reserves one event of p for each request, keyed
// by key: the request is refused when the key's pace is spent. It can be
// given back (Return, ReturnOn): a Pace limit returns exactly (see
// pace.Reservation.Return). With DecideAfterVerify, the event is taken only
// once the handler has verified the presentation.
//
// Its RateLimit-Policy item is q events per w seconds: q = p.Burst() over
// the time that burst takes to refill, rounded up to whole seconds (so a
// pace of 5/s is q=5;w=1, and a pace below one per second is q=1 over its
// interval rounded up). Its RateLimit item gives r, the whole events the key
// has left after the decision, and t, the seconds until its bucket is full
// again, rounded up.
func Pace(p *pace.Pace, key KeyFunc, opts ...Option) Limit {
	return Limit{kind: kindPace, pace: p, key: key, opts: opts}
}

// Shared returns a Limit that reserves one event of p for each request,
// keyed by key: a Pace shared by every replica that uses p's store (see
// pace.Shared). It is a Pace limit except that its decision may make a round
// trip to the store, so a store error is a StoreFailed outcome unless p has a
// fallback, and that DecideAfterVerify is not available. It can be given back
// (Return, ReturnOn), by a store call made with the request's context
// without its cancellation. The key given to p is prefixed as for Bucket.
// Its RateLimit-Policy has an item for the pace of pace.NewShared, named
// after the limit, and one for each quota of pace.WithQuota, named after
// the limit and its position ("api/1", "api/2"); its RateLimit item, of the
// pace's name, gives as r the whole events left in the key's tightest limit
// (docs/httplimit.md).
func Shared(p *pace.Shared, key KeyFunc, opts ...Option) Limit {
	return Limit{kind: kindShared, shared: p, key: key, opts: opts}
}

// Bucket returns a Limit that takes one token for each request from the
// token bucket at the request's key in s (Store.Take with one shape):
// capacity tokens, refilled at refillPerSec tokens per second, shared by
// every process that uses the same store. capacity must be at least 1 and
// refillPerSec positive; both finite. The key in the store is "httplimit:" +
// the limit's name, with '%' and ':' escaped as "%25" and "%3A", + ":" + the
// key, so two Bucket limits of the same name (in two replicas) share a
// bucket and limits of different names never do, whatever the names and
// keys contain. It can be given back (Return, ReturnOn)
// through Store.Refund: the request's own token, as much of it as has not
// refilled, once; a refund that fails leaves the token spent. It sends r and
// t as the store reports them. A store error is decided by the store's
// pace.WithFailurePolicy, if any (docs/httplimit.md).
func Bucket(s driver.Taker, capacity, refillPerSec float64, key KeyFunc, opts ...Option) Limit {
	return Limit{kind: kindBucket, taker: s, capacity: capacity, refill: refillPerSec, key: key, opts: opts}
}

// Slots returns a Limit that holds one of limit concurrent slots at the
// request's key in s (Store.AcquireSlot) while the handler runs: acquired
// before it, released when it returns, and refreshed every ttl/3 while it is
// still running (a long download, server-sent events, a WebSocket). limit
// must be at least 1 and ttl at least a millisecond (the unit in which
// stores such as Redis keep expiries; below it the refresh would run in a
// loop), or New's error wraps pace.ErrInvalidArgument. A key's slots are one counter with
// one expiry, so a crashed replica's slots are freed ttl after the key's
// last request anywhere ends. The key in the store is prefixed as for
// Bucket. A refusal is a 429 with a Retry-After of one second; a Slots limit
// is a cap on concurrency, not a quota, and sends no RateLimit-Policy or
// RateLimit item. It cannot take ReturnOn. docs/httplimit.md has the details.
func Slots(s driver.Slots, limit int64, ttl time.Duration, key KeyFunc, opts ...Option) Limit {
	return Limit{kind: kindSlots, slotter: s, slots: limit, ttl: ttl, key: key, opts: opts}
}

// minSlotTTL is the shortest ttl of a Slots limit: its slots are refreshed
// every third of it, which must not round to nothing.
const minSlotTTL = time.Millisecond

type limitConfig struct {
	name        string
	named       bool
	returnOn    []int
	afterVerify bool
	cost        CostFunc
	costed      bool
	costMax     int64
	costMaxSet  bool
}

// Name names the limit: in the RateLimit-Policy and RateLimit fields, in
// the refusal's problem details, in metrics and in the keys of a Store
// limit. It must be 1 to 64 printable ASCII characters and unique within a
// Middleware. The default is the kind of the limit followed by its position
// in the list given to New, as in "pace-0", "bucket-1", "slots-2".
func Name(name string) Option {
	return func(s *settings) {
		if c := s.limit("Name"); c != nil {
			c.name, c.named = name, true
		}
	}
}

// ReturnOn gives this limit's reservation back when the handler answers
// with one of the given statuses, as if the request had not been made: for
// a token endpoint, ReturnOn(http.StatusUnauthorized) on the per-client
// limit means that only accepted presentations spend a client's pace, so a
// forger naming someone else's client id spends nothing of it. Statuses
// accumulate over several ReturnOn and must be between 100 and 599. A
// Pace, a Shared or a Bucket limit takes it: New rejects it on Slots (a slot
// is always released when the handler returns).
//
// Reserve-then-return holds the reservation while the handler runs: with a
// slow check (a 50 ms password hash), forged requests in flight can hold the
// named client's whole bucket. Use DecideAfterVerify there.
func ReturnOn(status ...int) Option {
	return func(s *settings) {
		if c := s.limit("ReturnOn"); c != nil {
			c.returnOn = append(c.returnOn, status...)
		}
	}
}

// DecideAfterVerify makes a Pace limit decide after the handler has verified
// the presentation (a client secret, a password), so that one that fails
// verification never holds anything of the key's pace, however long
// verification takes. Before the handler the middleware only looks at the
// key's pace (pace.Pace.Peek) and refuses the request if one event would not
// fit; after a successful verification the handler calls Verified(w, r),
// which takes the event, or, if it no longer fits, gives back everything the
// request took, writes the refusal and returns false. A handler that never
// calls Verified is judged by its status: an error or a ReturnOn status
// takes nothing, any other takes the event whether or not it fits
// (pace.Pace.Debit). Choose it over reserve-then-return when verification is
// slow. Only a Pace limit takes it. docs/httplimit.md has the details.
func DecideAfterVerify() Option {
	return func(s *settings) {
		if c := s.limit("DecideAfterVerify"); c != nil {
			c.afterVerify = true
		}
	}
}

// limit is a Limit validated and prepared by NewLimiter.
type limit struct {
	Limit
	index       int    // position in the list given to New
	name        string // the policy name
	prefix      string // of a Store key: storePrefix(name)
	returnOn    statusSet
	afterVerify bool
	cost        CostFunc // with costed: of a Middleware's limit (nil for a Limiter's)
	costed      bool     // the limit reserves a cost (Cost)
	costMax     int64    // the body bound of cost (MaxCostBody)

	// Headers: policy is the RateLimit-Policy item ("" for none); items[r]
	// caches the RateLimit field of this limit alone with r remaining, for
	// r up to len(items)-1, made when first needed.
	policy   string   // one item, or several for a Shared with pace.WithQuota
	quotas   []string // the names of a Shared's pace.WithQuota quotas in policy
	quoted   string   // the name as a structured-field string
	q, w     int64
	interval time.Duration // of one event, for t
	rate     float64       // events per second: one per interval
	items    []atomic.Pointer[[]string]
	refusals []atomic.Pointer[[]string] // by Retry-After, in seconds
	problem  problemDoc                 // the default refusal, set by New
	shapes   []driver.Shape             // Bucket: its one shape, for Store.Take and Refund
}

// statusSet is a set of HTTP statuses, 100 to 599.
type statusSet [10]uint64

func (s *statusSet) add(code int) { s[code>>6] |= 1 << (code & 63) }
func (s *statusSet) has(code int) bool {
	return code >= 0 && code < 640 && s[code>>6]&(1<<(code&63)) != 0
}
func (s *statusSet) empty() bool { return *s == statusSet{} }

func (l *limit) refundable() bool           { return canRefund(l.kind) }
func (l *limit) undoable() bool             { return l.kind == kindSlots || l.refundable() }
func (l *limit) reportsRemaining() bool     { return l.kind != kindSlots }
func (l *limit) storeKey(key string) string { return l.prefix + key }

// canRefund reports whether a limit of kind k can be given back after it
// was taken: every kind but Slots, which is released instead.
func canRefund(k kind) bool { return k != kindSlots }

// maxItems bounds the cached RateLimit fields of one limit (8 KiB of
// pointers); a limit whose burst is larger formats the others each time
// (see itemIndex).
const maxItems = 1024

// compile validates l and prepares it as the i-th limit.
func compile(l Limit, i int, needKey bool) (limit, error) {
	c := limit{Limit: l, index: i}
	var cfg limitConfig
	if err := (&settings{lim: &cfg}).apply(l.opts); err != nil {
		return c, fmt.Errorf("httplimit: limit %d: %w", i, err)
	}
	if l.kind == 0 {
		return c, invalidf("limit %d is the zero Limit: build it with Pace, Shared, Bucket or Slots", i)
	}
	c.name = fmt.Sprintf("%s-%d", kindNames[l.kind], i)
	if cfg.named {
		if why := badName(cfg.name); why != "" {
			return c, invalidf("limit %d: %s", i, why)
		}
		c.name = cfg.name
	}
	if needKey && l.key == nil {
		return c, invalidf("limit %q has a nil KeyFunc", c.name)
	}
	for _, s := range cfg.returnOn {
		if s < 100 || s > 599 {
			return c, invalidf("limit %q: ReturnOn status %d outside [100, 599]", c.name, s)
		}
		c.returnOn.add(s)
	}
	if !c.returnOn.empty() && !canRefund(l.kind) {
		return c, invalidf("limit %q: ReturnOn on a %s limit: a slot is always released when the handler returns", c.name, kindNames[l.kind])
	}
	if cfg.afterVerify && l.kind != kindPace {
		return c, invalidf("limit %q: DecideAfterVerify needs a Pace limit", c.name)
	}
	c.afterVerify = cfg.afterVerify
	if err := c.compileCost(cfg, needKey); err != nil {
		return c, err
	}
	c.prefix = storePrefix(c.name)
	switch l.kind {
	case kindPace:
		if l.pace == nil {
			return c, invalidf("limit %q: nil *pace.Pace", c.name)
		}
		c.interval = time.Duration(math.Ceil(float64(time.Second) / l.pace.Rate()))
		c.q = int64(l.pace.Burst()) // WithBurst's, or one second of the pace
		c.w = windowSeconds(float64(c.q), l.pace.Rate())
	case kindShared:
		if l.shared == nil {
			return c, invalidf("limit %q: nil *pace.Shared", c.name)
		}
		b := l.shared.Shapes()[0] // the pace of NewShared: a bucket of one second of it
		rate := float64(time.Second) / float64(b.Interval())
		c.interval = b.Interval()
		c.q = int64(b.Tolerance() / b.Interval())
		c.w = windowSeconds(float64(c.q), rate)
	case kindBucket:
		if l.taker == nil {
			return c, invalidf("limit %q: nil Store", c.name)
		}
		b, err := driver.NewShape(l.capacity, l.refill, 1)
		if err != nil {
			return c, fmt.Errorf("httplimit: limit %q: %w", c.name, err)
		}
		c.shapes = []driver.Shape{b}
		c.interval = b.Interval()
		c.q = int64(math.Floor(l.capacity))
		c.w = windowSeconds(math.Floor(l.capacity), l.refill)
	case kindSlots:
		if l.slotter == nil {
			return c, invalidf("limit %q: nil Store", c.name)
		}
		if err := driver.ValidateSlot("k", l.slots, l.ttl); err != nil {
			return c, fmt.Errorf("httplimit: limit %q: %w", c.name, err)
		}
		if l.ttl < minSlotTTL {
			return c, invalidf("limit %q: slot ttl %v below %v", c.name, l.ttl, minSlotTTL)
		}
	}
	if c.interval > 0 {
		c.rate = float64(time.Second) / float64(c.interval)
	}
	c.quoted = sfString(c.name)
	if l.kind != kindSlots {
		c.policy = policyItem(c.quoted, c.q, c.w)
	}
	if l.kind == kindShared {
		// The quotas of pace.WithQuota are items of their own, named
		// after the limit and their position: "api/1", "api/2".
		for j, b := range l.shared.Shapes()[1:] {
			name := c.name + "/" + strconv.Itoa(j+1)
			q := int64(b.Tolerance() / b.Interval())
			w := windowSeconds(float64(q), float64(time.Second)/float64(b.Interval()))
			c.policy += ", " + policyItem(sfString(name), q, w)
			c.quotas = append(c.quotas, name)
		}
	}
	if c.reportsRemaining() {
		c.items = make([]atomic.Pointer[[]string], min(c.q, maxItems)+1)
		c.refusals = make([]atomic.Pointer[[]string], min(c.w, maxItems)+1)
	}
	return c, nil
}

// policyItem returns the RateLimit-Policy item of a quota of q events per w
// seconds named by the structured-field string quoted.
func policyItem(quoted string, q, w int64) string {
	return quoted + ";q=" + strconv.FormatInt(q, 10) + ";w=" + strconv.FormatInt(w, 10)
}

// fullIn reports, in whole seconds rounded up, when the bucket of q events
// of a Pace, Shared or Bucket limit that has r whole events left is full
// again: at most the time its q-r missing events take to refill (the
// interval's nanosecond rounding ignored, as in windowSeconds).
func (l *limit) fullIn(r int) int64 {
	if int64(r) >= l.q {
		return 0
	}
	return windowSeconds(float64(l.q-int64(r)), l.rate)
}

// item returns this limit's RateLimit item with r remaining and an
// effective window of t seconds.
func (l *limit) item(r int, t int64) string {
	var buf [128]byte // a name of 64 bytes, quoted and escaped, and two numbers
	b := append(buf[:0], l.quoted...)
	b = strconv.AppendInt(append(b, ";r="...), int64(r), 10)
	b = strconv.AppendInt(append(b, ";t="...), t, 10)
	return string(b)
}

// field returns the RateLimit field of this limit with r remaining after an
// admission (see cached).
func (l *limit) field(r int, one *[1]string) []string {
	return cached(l.items, l.itemIndex(r), one, func() string { return l.item(r, l.fullIn(r)) })
}

// itemIndex returns the index in items of the field with r remaining, or -1
// when it is not cached. A quota of up to maxItems caches every r; a larger
// one its lowest maxItems/2+1 counts (a busy key's) and its highest
// maxItems/2 (q-1 and below, which a key that was idle shows: the first
// request of most clients of a large quota).
func (l *limit) itemIndex(r int) int {
	q := int(l.q)
	switch {
	case q < maxItems || r <= maxItems/2:
		return r
	case q-r < maxItems/2:
		return maxItems - (q - r)
	}
	return -1
}

// refusedField returns the RateLimit field of this limit refusing with a
// Retry-After of t seconds (see cached).
func (l *limit) refusedField(t int64, one *[1]string) []string {
	return cached(l.refusals, int(t), one, func() string { return l.item(0, t) })
}

// cached returns a header field line of one value: cache[i], made by make
// the first time it is needed, when i is within the cache (a slice shared
// by every response, so never written into: its capacity is its length, so
// an Add copies), and otherwise one[:], or a new slice if one is nil, made
// each time.
func cached(cache []atomic.Pointer[[]string], i int, one *[1]string, make func() string) []string {
	if i < 0 || i >= len(cache) {
		if one == nil {
			return []string{make()}
		}
		one[0] = make()
		return one[:]
	}
	if f := cache[i].Load(); f != nil {
		return *f
	}
	f := []string{make()}
	cache[i].Store(&f) // racing stores store equal fields
	return f
}

// windowSeconds returns the whole seconds, rounded up and at least one,
// that q events take at perSecond; the rounding of a pace's interval to the
// nanosecond (up to 1 ns an event, so q ns in all) is ignored, so that a
// pace of 3/s is 3 per 1 s, not per 2 s, and one of 3,000/s too.
func windowSeconds(q, perSecond float64) int64 {
	return max(1, int64(math.Ceil(q/perSecond-q*1e-9-1e-6)))
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// storePrefix returns the prefix of the store keys of the limit named name:
// "httplimit:", the name with '%' and ':' escaped as "%25" and "%3A", and
// ":". The escaped name holds no ':', so the first ':' after "httplimit:"
// ends it: a store key names one limit and one key, whatever either
// contains, and limits of different names never share state. A name
// without '%' or ':' is written as it is.
func storePrefix(name string) string {
	if !strings.ContainsAny(name, "%:") {
		return "httplimit:" + name + ":"
	}
	var b strings.Builder
	b.WriteString("httplimit:")
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		default:
			b.WriteByte(name[i])
		}
	}
	b.WriteByte(':')
	return b.String()
}

// badName returns what is wrong with a limit name, or "" when it is 1 to 64
// printable ASCII characters.
func badName(name string) string {
	if name == "" || len(name) > 64 {
		return fmt.Sprintf("name of %d bytes: want 1 to 64", len(name))
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7E {
			return "name with a byte outside printable ASCII"
		}
	}
	return ""
}

// sfString serialises s, printable ASCII, as a structured-field string
// (RFC 8941 section 4.1.6).
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// statusText returns the reason phrase of code, or "Error".
func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "Error"
}
