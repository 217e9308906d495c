// Package pgstore implements pace.Store on PostgreSQL, for limits shared by many processes.
package pgstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	_ "embed"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ratepace/pace"
	"github.com/ratepace/pace/driver"
)

var (
	//go:embed schema.sql
	schemaSQL string
	//go:embed sweep.sql
	sweepSQL string
)

// schemaVersion is recorded in the schema's meta table. New reinstalls the
// tables and functions when the recorded version differs; bump it whenever
// schema.sql or sweep.sql changes.
const schemaVersion = 4

// tables are the five namespaces, in the order Delete clears them.
var tables = []string{"buckets", "slots", "bursts", "vals", "takes"}

// reclaimAt returns the column of table that bounds its rows' reclaim time,
// through which its sweep function (sweep.sql) finds them: sweep_at, or for
// vals, whose rows are reclaimable exactly when they expire, expires.
func reclaimAt(table string) string {
	if table == "vals" {
		return "expires"
	}
	return "sweep_at"
}

// placeholders returns the replacer of the one placeholder scheme of every
// statement pgstore runs (schema.sql, sweep.sql and the queries of New): a
// name between two at signs stands for a value written in by Go, pairs
// being placeholder names and their values. The quoted schema name and
// pace.BurstRefillWindow are always there, so no SQL holds a constant of
// its own.
func placeholders(schema string, pairs ...string) *strings.Replacer {
	all := []string{"@schema@", schema, "@refill_window@", strconv.FormatInt(int64(pace.BurstRefillWindow), 10)}
	for i := 0; i+1 < len(pairs); i += 2 {
		all = append(all, "@"+pairs[i]+"@", pairs[i+1])
	}
	return strings.NewReplacer(all...)
}

// ddl returns the statements that install the schema: schema.sql, then
// sweep.sql for each table, with every empty dollar-quote delimiter made a
// tag that the quoted name does not contain (before the name is written
// in, so that no dollar sign of the name is taken for a delimiter), and
// every placeholder replaced.
func ddl(schema string, unlogged bool) string {
	persistence := ""
	if unlogged {
		persistence = "UNLOGGED"
	}
	tag := dollarTag(schema)
	src := placeholders(schema, "unlogged", persistence, "version", strconv.Itoa(schemaVersion)).
		Replace(strings.ReplaceAll(schemaSQL, "$$", tag))
	for _, t := range tables {
		src += "\n" + placeholders(schema, "table", t, "reclaim_at", reclaimAt(t)).
			Replace(strings.ReplaceAll(sweepSQL, "$$", tag))
	}
	return src
}

// Store is a pace.Store on PostgreSQL, in five tables of one schema shared
// by every process that opens a Store on the same database and schema. Every
// operation is one round trip, one call of a PL/pgSQL function that locks the
// key's row and then reads the database clock, so decisions are exact across
// any number of connections and processes, whatever the application servers'
// clocks say, and agree with the Go reference arithmetic (driver.Shape, the
// burst functions) to the nanosecond. The functions expect READ COMMITTED.
//
// Keys are stored as their SHA-256 digest (WithHashedKeys: a keyed hash).
// Dead rows are reclaimed in bounded batches by the calls that insert, with
// no background goroutine. Each call commits asynchronously by default (see
// WithSynchronousCommit). When the database is unreachable every method
// returns an error: give each call a deadline, or wrap the Store with
// pace.WithFailurePolicy. docs/replicas.md ("PostgreSQL in detail") has the
// long story. A Store must be created with New. It is safe for concurrent
// use by multiple goroutines.
type Store struct {
	pool   *pgxpool.Pool
	sweep  int32
	closed atomic.Bool
	// now, when set (tests only), replaces the database clock: its value is
	// passed as every function's p_now.
	now func() int64
	q   queries
	// macs, with WithHashedKeys, hash keys under the secret; nil: plain
	// SHA-256.
	macs *sync.Pool
}

type queries struct {
	take, acquireSlot, releaseSlot, refreshSlot string
	acquireBurst, releaseBurst, refreshBurst    string
	get, set, del, sweep                        string
	takeAll, takeMany, refundAll                string
}

// New returns a Store on pool, creating its schema, tables and functions if
// they do not exist yet (or are of an older version). Creation runs in one
// transaction under an advisory lock derived from the schema name, so any
// number of processes may call New at once. The role needs CREATE on the
// database the first time, and USAGE on the schema plus SELECT, INSERT,
// UPDATE and DELETE on its tables afterwards.
//
// New does not take ownership of pool: Close leaves it open, and the caller
// closes it after the Store. Invalid options return an error wrapping
// pace.ErrInvalidArgument; a database error is returned as it is.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgstore: nil pool: %w", pace.ErrInvalidArgument)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	schema := pgx.Identifier{cfg.schema}.Sanitize()
	if err := install(ctx, pool, cfg, schema); err != nil {
		return nil, fmt.Errorf("pgstore: installing schema %+q: %w", cfg.schema, err) // %+q: ASCII whatever the name
	}
	// Every statement that writes ends with @commit@: nothing, or a one-row
	// function in FROM that turns off synchronous commit for the statement's
	// own transaction (see WithSynchronousCommit). Statements that already
	// have a FROM clause join it with @commit_join@ instead.
	commit, join := "", ""
	if !cfg.syncCommit {
		commit = " FROM set_config('synchronous_commit', 'off', true)"
		join = ", set_config('synchronous_commit', 'off', true)"
	}
	r := placeholders(schema, "commit", commit, "commit_join", join)
	s := &Store{
		pool:  pool,
		sweep: int32(min(cfg.sweep, 1<<30)),
		q: queries{
			take:         r.Replace(`SELECT t.allowed, t.wait FROM @schema@.take($1, $2, $3, $4, $5) AS t@commit_join@`),
			acquireSlot:  r.Replace(`SELECT a.acquired, a.current FROM @schema@.acquire_slot($1, $2, $3, $4, $5) AS a@commit_join@`),
			releaseSlot:  r.Replace(`SELECT @schema@.settle_slot($1, NULL, $2)@commit@`),
			refreshSlot:  r.Replace(`SELECT @schema@.settle_slot($1, $2, $3)@commit@`),
			acquireBurst: r.Replace(`SELECT a.acquired, a.current FROM @schema@.acquire_burst($1, $2, $3, $4, $5, $6, $7) AS a@commit_join@`),
			releaseBurst: r.Replace(`SELECT @schema@.settle_burst($1, NULL, $2)@commit@`),
			refreshBurst: r.Replace(`SELECT @schema@.settle_burst($1, $2, $3)@commit@`),
			get:          r.Replace(`SELECT value FROM @schema@.vals WHERE key = $1 AND (expires IS NULL OR expires > coalesce($2, @schema@.now_ns()))`),
			set:          r.Replace(`SELECT @schema@.set_value($1, $2, $3, $4, $5)@commit@`),
			del:          r.Replace(`SELECT @schema@.delete_key($1)@commit@`),
			sweep:        r.Replace(`SELECT @schema@.sweep($1, $2)@commit@`),
			takeAll:      r.Replace(`SELECT t.r_taken, t.r_now, t.r_gen, t.r_tats FROM @schema@.take_all($1, $2, $3, $4, $5, $6) AS t@commit_join@`),
			takeMany:     r.Replace(`SELECT t.r_ord, t.r_taken, t.r_now, t.r_gen, t.r_tats FROM @schema@.take_many($1, $2, $3, $4, $5, $6) AS t@commit_join@`),
			refundAll:    r.Replace(`SELECT @schema@.refund_all($1, $2, $3, $4, $5, $6)@commit@`),
		},
	}
	if cfg.hashed {
		s.macs = &sync.Pool{New: func() any { return hmac.New(sha256.New, cfg.secret) }}
	}
	return s, nil
}

// install creates or upgrades the schema in one transaction, serialised
// across processes by a transaction-scoped advisory lock: concurrent
// CREATE … IF NOT EXISTS and CREATE OR REPLACE statements can otherwise fail
// with unique violations or "tuple concurrently updated". When the schema is
// current it changes nothing, so a new replica never blocks running ones.
func install(ctx context.Context, pool *pgxpool.Pool, cfg config, schema string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		h := fnv.New64a()
		h.Write([]byte("github.com/ratepace/pace/pgstore\x00" + cfg.schema))
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+".meta").Scan(&exists); err != nil {
			return err
		}
		version := 0
		if exists {
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+schema+`.meta`).Scan(&version); err != nil {
				return err
			}
		}
		if version != schemaVersion {
			if _, err := tx.Exec(ctx, ddl(schema, cfg.unlogged)); err != nil {
				return err
			}
		}
		return alignPersistence(ctx, tx, cfg)
	})
}

// dollarTag returns the delimiter that quotes the function bodies of
// schema.sql once quoted is spliced into them: a tagged dollar quote that
// does not occur in quoted, so that no schema name can end a body early.
// (Within a body the name is then lexed as the quoted identifier it is.)
func dollarTag(quoted string) string {
	for i := 0; ; i++ {
		tag := "$pgstore" + strconv.Itoa(i) + "$"
		if !strings.Contains(quoted, tag) {
			return tag
		}
	}
}

// alignPersistence makes the tables LOGGED or UNLOGGED as cfg asks, when
// they were created the other way.
func alignPersistence(ctx context.Context, tx pgx.Tx, cfg config) error {
	want := "p"
	if cfg.unlogged {
		want = "u"
	}
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind = 'r' AND c.relpersistence <> $3`,
		cfg.schema, tables, want)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	set := "LOGGED"
	if cfg.unlogged {
		set = "UNLOGGED"
	}
	for _, name := range names {
		if _, err := tx.Exec(ctx, "ALTER TABLE "+pgx.Identifier{cfg.schema, name}.Sanitize()+" SET "+set); err != nil {
			return err
		}
	}
	return nil
}

// Close marks the store closed: every later call returns an error wrapping
// pace.ErrClosed. It does not close the pool, which belongs to the caller,
// and it leaves the schema and its rows in place for other processes. Calls
// already running finish normally. Close is idempotent and always returns
// nil.
func (s *Store) Close(context.Context) error {
	s.closed.Store(true)
	return nil
}

// errClosed is returned by every method after Close.
var errClosed = fmt.Errorf("pgstore: %w", pace.ErrClosed)

// digest returns the row key of key without WithHashedKeys: its SHA-256.
func digest(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

// rowKey returns the row key of key: its digest, or with WithHashedKeys its
// HMAC-SHA-256 under the secret.
func (s *Store) rowKey(key string) []byte {
	if s.macs == nil {
		return digest(key)
	}
	m := s.macs.Get().(hash.Hash)
	m.Reset()
	io.WriteString(m, key)
	sum := m.Sum(nil)
	s.macs.Put(m)
	return sum
}

// nowArg returns the p_now argument: nil (the database clock) unless a test
// installed a clock.
func (s *Store) nowArg() any {
	if s.now == nil {
		return nil
	}
	return s.now()
}

// TokenBucket implements pace.Store.TokenBucket with the arithmetic of
// driver.Shape: one GCRA step on the key's theoretical arrival time, in
// nanoseconds, on the database clock. A refusal writes nothing. A take that
// leaves the bucket full (cost 0) stores nothing.
func (s *Store) TokenBucket(ctx context.Context, key string, capacity, refillPerSec, cost float64) (allowed bool, retryAfter time.Duration, err error) {
	if s.closed.Load() {
		return false, 0, errClosed
	}
	b, err := driver.ValidateTokenBucket(key, capacity, refillPerSec, cost)
	if err != nil {
		return false, 0, err
	}
	var wait int64
	err = s.pool.QueryRow(ctx, s.q.take, s.rowKey(key), int64(b.Interval()), int64(b.Tolerance()), s.nowArg(), s.sweep).
		Scan(&allowed, &wait)
	if err != nil {
		return false, 0, fmt.Errorf("pgstore: TokenBucket: %w", err)
	}
	return allowed, time.Duration(wait), nil
}

// AcquireSlot implements pace.Store.AcquireSlot. An expired counter counts as
// zero. On admission the counter's expiry becomes now + ttl; a refusal
// changes nothing and reports the unchanged count.
func (s *Store) AcquireSlot(ctx context.Context, key string, limit int64, ttl time.Duration) (acquired bool, current int64, err error) {
	if s.closed.Load() {
		return false, 0, errClosed
	}
	if err := driver.ValidateSlot(key, limit, ttl); err != nil {
		return false, 0, err
	}
	err = s.pool.QueryRow(ctx, s.q.acquireSlot, s.rowKey(key), limit, int64(ttl), s.nowArg(), s.sweep).
		Scan(&acquired, &current)
	if err != nil {
		return false, 0, fmt.Errorf("pgstore: AcquireSlot: %w", err)
	}
	return acquired, current, nil
}

// AcquireSlotBurst implements pace.Store.AcquireSlotBurst with the arithmetic
// of pace.AdmitBurst, on the database clock.
func (s *Store) AcquireSlotBurst(ctx context.Context, key string, sustained, ceiling int64, burstBudget, ttl time.Duration) (acquired bool, current int64, err error) {
	if s.closed.Load() {
		return false, 0, errClosed
	}
	if err := driver.ValidateSlotBurst(key, sustained, ceiling, burstBudget, ttl); err != nil {
		return false, 0, err
	}
	err = s.pool.QueryRow(ctx, s.q.acquireBurst, s.rowKey(key), sustained, ceiling, int64(burstBudget), int64(ttl), s.nowArg(), s.sweep).
		Scan(&acquired, &current)
	if err != nil {
		return false, 0, fmt.Errorf("pgstore: AcquireSlotBurst: %w", err)
	}
	return acquired, current, nil
}

// ReleaseSlot implements pace.Store.ReleaseSlot. Releasing the last holder
// deletes the row; releasing an absent or expired counter does nothing.
func (s *Store) ReleaseSlot(ctx context.Context, key string) error {
	return s.exec(ctx, "ReleaseSlot", key, s.q.releaseSlot, 0, false)
}

// RefreshSlot implements pace.Store.RefreshSlot: a live counter's expiry
// becomes now + ttl; an absent or expired counter stays absent.
func (s *Store) RefreshSlot(ctx context.Context, key string, ttl time.Duration) error {
	return s.exec(ctx, "RefreshSlot", key, s.q.refreshSlot, ttl, true)
}

// ReleaseSlotBurst implements pace.Store.ReleaseSlotBurst with the arithmetic
// of pace.ReleaseBurst. It does nothing to an absent slot.
func (s *Store) ReleaseSlotBurst(ctx context.Context, key string) error {
	return s.exec(ctx, "ReleaseSlotBurst", key, s.q.releaseBurst, 0, false)
}

// RefreshSlotBurst implements pace.Store.RefreshSlotBurst with the arithmetic
// of pace.RefreshBurst. It never creates a slot.
func (s *Store) RefreshSlotBurst(ctx context.Context, key string, ttl time.Duration) error {
	return s.exec(ctx, "RefreshSlotBurst", key, s.q.refreshBurst, ttl, true)
}

// exec runs one of the void functions whose arguments are the key, a ttl
// (refreshes, hasTTL true; releases take none) and p_now.
func (s *Store) exec(ctx context.Context, op, key, sql string, ttl time.Duration, hasTTL bool) error {
	if s.closed.Load() {
		return errClosed
	}
	var err error
	if !hasTTL {
		if err := driver.ValidateKey(key); err != nil {
			return err
		}
		_, err = s.pool.Exec(ctx, sql, s.rowKey(key), s.nowArg())
	} else {
		if err := driver.ValidateRefresh(key, ttl); err != nil {
			return err
		}
		_, err = s.pool.Exec(ctx, sql, s.rowKey(key), int64(ttl), s.nowArg())
	}
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	return nil
}

// Get implements pace.Store.Get. The returned slice is the caller's own.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	var v []byte
	err := s.pool.QueryRow(ctx, s.q.get, s.rowKey(key), s.nowArg()).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: Get: %w", pace.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: Get: %w", err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// Set implements pace.Store.Set. ttl 0 never expires; an expiry beyond year
// 2262 is saturated there.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if s.closed.Load() {
		return errClosed
	}
	if err := driver.ValidateSet(key, ttl); err != nil {
		return err
	}
	if value == nil {
		value = []byte{} // nil would be sent as NULL
	}
	if _, err := s.pool.Exec(ctx, s.q.set, s.rowKey(key), value, int64(ttl), s.nowArg(), s.sweep); err != nil {
		return fmt.Errorf("pgstore: Set: %w", err)
	}
	return nil
}

// Delete implements pace.Store.Delete, in one round trip for the five
// namespaces.
func (s *Store) Delete(ctx context.Context, key string) error {
	if s.closed.Load() {
		return errClosed
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.q.del, s.rowKey(key)); err != nil {
		return fmt.Errorf("pgstore: Delete: %w", err)
	}
	return nil
}

// Sweep deletes up to limit reclaimable rows from each of the five tables,
// in one round trip, and reports how many it deleted. Rows locked by running
// operations are skipped. Operations already sweep in small batches (see
// WithSweepBatch); Sweep is for callers that disabled that, or that want the
// space back sooner after a flood of distinct keys. limit must be at least 1
// (else the error wraps pace.ErrInvalidArgument); a limit above 2^30 counts
// as 2^30.
func (s *Store) Sweep(ctx context.Context, limit int) (deleted int64, err error) {
	if s.closed.Load() {
		return 0, errClosed
	}
	if limit < 1 {
		return 0, fmt.Errorf("pgstore: sweep limit %d < 1: %w", limit, pace.ErrInvalidArgument)
	}
	if err := s.pool.QueryRow(ctx, s.q.sweep, int32(min(limit, 1<<30)), s.nowArg()).Scan(&deleted); err != nil {
		return 0, fmt.Errorf("pgstore: Sweep: %w", err)
	}
	return deleted, nil
}
