package pgstore

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ratepace/pace"
)

// Option configures a Store at New.
type Option func(*config)

type config struct {
	schema     string
	unlogged   bool
	sweep      int
	syncCommit bool
	secret     []byte // with hashed: the key of WithHashedKeys
	hashed     bool
}

// Defaults, gathered in one place.
const (
	// DefaultSchema is the schema that holds the store's tables and
	// functions unless WithSchema says otherwise.
	DefaultSchema = "pace"
	// MinKeySecret is the shortest secret WithHashedKeys accepts, in
	// bytes.
	MinKeySecret = 16
	// DefaultSweepBatch is how many reclaimable rows an operation that
	// inserts a new row deletes from the same table (see WithSweepBatch).
	DefaultSweepBatch = 4
)

func newConfig(opts []Option) (config, error) {
	cfg := config{schema: DefaultSchema, sweep: DefaultSweepBatch}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	// PostgreSQL truncates identifiers to NAMEDATALEN-1 = 63 bytes; two
	// names that differ only past that would silently share a schema.
	if cfg.schema == "" || len(cfg.schema) > 63 || strings.ContainsRune(cfg.schema, 0) || !utf8.ValidString(cfg.schema) {
		return cfg, fmt.Errorf("pgstore: schema name must be 1 to 63 bytes of UTF-8 without NUL: %w", pace.ErrInvalidArgument)
	}
	// The server reserves the prefix for its own schemas (pg_catalog,
	// pg_toast, pg_temp_N) and refuses to create one.
	if strings.HasPrefix(cfg.schema, "pg_") {
		return cfg, fmt.Errorf("pgstore: schema names starting with pg_ are reserved by PostgreSQL: %w", pace.ErrInvalidArgument)
	}
	if cfg.hashed && len(cfg.secret) < MinKeySecret {
		return cfg, fmt.Errorf("pgstore: key secret of %d bytes; want at least %d: %w", len(cfg.secret), MinKeySecret, pace.ErrInvalidArgument)
	}
	if cfg.sweep < 0 {
		return cfg, fmt.Errorf("pgstore: negative sweep batch %d: %w", cfg.sweep, pace.ErrInvalidArgument)
	}
	return cfg, nil
}

// WithSchema sets the PostgreSQL schema that holds the store's tables and
// functions. The default is DefaultSchema ("pace"). The name is used as a
// quoted identifier (case, spaces, quotes, dollars and every other character
// are kept, and none of them can change the SQL New runs) and must be 1 to
// 63 bytes of UTF-8 without NUL, not starting with "pg_" (reserved by the
// server); any other name makes New fail with an error wrapping
// pace.ErrInvalidArgument. Stores in different schemas share
// nothing; stores in the same schema, in any number of processes, share
// every key.
func WithSchema(name string) Option {
	return func(c *config) { c.schema = name }
}

// WithUnlogged makes the store's tables UNLOGGED when on is true: writes skip
// the write-ahead log, which makes every decision cheaper, but the tables are
// emptied after a crash of the server (not after a clean shutdown) and are not
// replicated to standbys. After a crash every bucket is full and every slot
// counter zero, which for a rate limiter is usually acceptable. The default is
// false (ordinary, crash-safe tables). New converts existing tables when the
// option differs from what it finds, which rewrites them under an exclusive
// lock: every process sharing a schema should pass the same value.
func WithUnlogged(on bool) Option {
	return func(c *config) { c.unlogged = on }
}

// WithSweepBatch sets how many reclaimable rows (full buckets, expired
// counters and values, burst slots past their ReclaimAt) an operation that
// inserts a new row deletes from the same table, in the same round trip.
// Because every insert removes up to n ≥ 1 dead rows, the tables never hold
// more than their peak of live rows plus n. The default is
// DefaultSweepBatch (4); 0 disables the amortised sweep, and then the caller
// must call Store.Sweep now and then or the tables grow without bound. A
// negative n makes New fail with an error wrapping pace.ErrInvalidArgument;
// an n above 2^30 counts as 2^30.
func WithSweepBatch(n int) Option {
	return func(c *config) { c.sweep = n }
}

// WithSynchronousCommit sets whether each call waits for its transaction to
// be flushed to disk (and to synchronous standbys) before returning.
//
// The default, false, makes every call set synchronous_commit = off for its
// own transaction only (set_config(…, true) in the same statement): the
// decision is visible to every other connection at once, so decisions stay
// exact under concurrency, and a call costs no disk flush. What it gives up
// is durability of the last moments before a server crash (up to three times
// wal_writer_delay, 600 ms by default): after a crash those takes and
// acquisitions are forgotten, leaving buckets slightly fuller and counters
// slightly lower, which a rate limiter can afford. It cannot corrupt the
// tables. true keeps the server's own synchronous_commit setting; expect
// one WAL flush per call (about a millisecond on a typical disk).
func WithSynchronousCommit(on bool) Option {
	return func(c *config) { c.syncCommit = on }
}

// WithHashedKeys makes the Store key its rows by HMAC-SHA-256 of the
// caller's key under secret (32 bytes) instead of its plain SHA-256 digest.
// A plain digest hides only keys that cannot be guessed: whoever reads the
// tables (a dump, a replica, a backup) can hash every IPv4 address, or every
// client id of a known shape, and find the ones stored. Without secret, the
// keyed hash cannot be checked against a guess.
//
// The secret must be at least MinKeySecret (16) bytes (32 random bytes is
// the usual choice); otherwise New returns an error wrapping
// pace.ErrInvalidArgument. Every Store sharing a schema must use the same
// secret: changing it starts every key afresh (full buckets, empty slot
// counters, no values). The cost is one HMAC per call in the client, well
// under a microsecond beside the round trip.
func WithHashedKeys(secret []byte) Option {
	return func(c *config) {
		c.secret = append([]byte(nil), secret...)
		c.hashed = true
	}
}
