package redisstore

import "time"

// DefaultPrefix is the key prefix of a Store built without WithPrefix.
const DefaultPrefix = "pace:"

// Option configures a Store built by New.
type Option func(*config)

type config struct {
	prefix string
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
// so every method of a Store built with one returns an error wrapping
// pace.ErrInvalidArgument.
func WithPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// withClock makes the scripts take now from clock instead of the server's
// TIME. For tests only.
func withClock(clock func() time.Time) Option {
	return func(c *config) { c.clock = clock }
}
