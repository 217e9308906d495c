package redisstore

import "time"

// DefaultPrefix is the key prefix of a Store built without WithPrefix.
const DefaultPrefix = "pace:"

// Option configures a Store built by New.
type Option func(*config)

type config struct {
	prefix string
	// secret, when hashed is set, is the key of WithHashedKeys.
	secret []byte
	hashed bool
	// clock, when set, replaces the server's TIME in the scripts. Only the
	// package's tests set it (through withClock), to replay a scenario
	// against the Go reference arithmetic; production always uses TIME.
	clock func() time.Time
}

func defaults() config {
	return config{prefix: DefaultPrefix}
}

// WithPrefix sets the text that starts every key the Store writes, so that
// several stores (or applications) share one Redis without colliding.
// The default is DefaultPrefix, "pace:". The empty prefix is allowed.
//
// A prefix may hold a Redis Cluster hash tag of its own ("app{1}:"): every
// key of the store then lands in that one slot. A prefix whose first "{" is
// followed at once by "}" would scatter the namespaces of a key across slots,
// so New refuses it with an error wrapping pace.ErrInvalidArgument.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// withClock makes the scripts take now from clock instead of the server's
// TIME. For tests only.
func withClock(clock func() time.Time) Option {
	return func(c *config) { c.clock = clock }
}

// WithHashedKeys makes the Store write every key under the keyed hash of
// the caller's key instead of the key itself: the first 128 bits of
// HMAC-SHA-256 under secret, in base64, inside the hash tag (so the
// namespaces of one key still share a Cluster slot). A dump of Redis, MONITOR
// or a replica then shows no client id or address, and without secret a
// guessed id cannot be checked against it; it still shows how many keys are
// live and how busy each one is. The secret must be at least MinKeySecret
// (16) bytes, else New returns an error wrapping pace.ErrInvalidArgument.
// Every Store sharing a Redis must use the same secret; changing it starts
// every key afresh. Two keys share state only if their hashes collide (odds
// about n²/2¹²⁹ for n live keys). It costs one HMAC per call, under a
// microsecond (BenchmarkHashedKeys).
func WithHashedKeys(secret []byte) Option {
	return func(c *config) {
		c.secret = append([]byte(nil), secret...)
		c.hashed = true
	}
}
