package pgstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/fakeclock"
	"github.com/ratepace/pace/internal/takemodel"
	"github.com/ratepace/pace/storetest"
)

const testSecret = "0123456789abcdef0123456789abcdef"

// TestContractHashedKeys runs the contract suite on a Store that keys its
// rows by HMAC, on a fake clock.
func TestContractHashedKeys(t *testing.T) {
	pool := testPool(t)
	schema := testSchema(t, pool)
	c := fakeclock.New(time.Unix(0, t0))
	storetest.Run(t, func(t *testing.T) pace.Store {
		s, err := New(context.Background(), pool, WithSchema(schema), WithHashedKeys([]byte(testSecret)))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return withClock(s, c)
	}, storetest.WithAdvance(c.Advance))
	storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore {
		s, err := New(context.Background(), pool, WithSchema(schema), WithHashedKeys([]byte(testSecret)))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return withClock(s, c)
	}, storetest.WithAdvance(c.Advance))
}

// TestHashedKeysHideClientIDs writes a client id in all five namespaces
// through a Store with WithHashedKeys: every table's row key is
// HMAC-SHA-256(secret, id), not its plain SHA-256 (which anyone can compute
// from a guessed id). A Store with the same secret shares the state; one
// with another secret does not.
func TestHashedKeysHideClientIDs(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	s, schema := newTestStore(t, pool, WithHashedKeys([]byte(testSecret)))
	const id = "client-42@203.0.113.7"
	shapes := takemodel.WriteAll(t, s, id)
	mac := hmac.New(sha256.New, []byte(testSecret))
	mac.Write([]byte(id))
	want := mac.Sum(nil)
	for _, table := range tables {
		var keys [][]byte
		rows, err := pool.Query(ctx, "SELECT key FROM "+pgx.Identifier{schema, table}.Sanitize())
		if err == nil {
			keys, err = pgx.CollectRows(rows, pgx.RowTo[[]byte])
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 || !hmac.Equal(keys[0], want) {
			t.Errorf("%s holds keys %x; want only HMAC-SHA-256(secret, id) = %x", table, keys, want)
		}
	}
	same, err := New(ctx, pool, WithSchema(schema), WithHashedKeys([]byte(testSecret)))
	if err != nil {
		t.Fatal(err)
	}
	if g, err := same.Take(ctx, id, shapes); g.OK || err != nil {
		t.Errorf("Take through a Store with the same secret = %+v, %v; want refused (the key's one take is spent)", g, err)
	}
	for _, other := range []Option{WithHashedKeys([]byte(strings.ToUpper(testSecret))), nil} {
		o, err := New(ctx, pool, WithSchema(schema), other)
		if err != nil {
			t.Fatal(err)
		}
		if g, err := o.Take(ctx, id, shapes); !g.OK || err != nil {
			t.Errorf("Take through a Store with another secret or none = %+v, %v; want OK (another row)", g, err)
		}
	}
}

// TestHashedKeysShortSecret checks that New refuses a secret shorter than
// MinKeySecret, creating nothing.
func TestHashedKeysShortSecret(t *testing.T) {
	pool := testPool(t)
	schema := testSchema(t, pool)
	for _, secret := range [][]byte{nil, {}, []byte("fifteen bytes!!")} {
		if _, err := New(context.Background(), pool, WithSchema(schema), WithHashedKeys(secret)); !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("New with a secret of %d bytes = %v; want an error wrapping ErrInvalidArgument", len(secret), err)
		}
	}
	var exists bool
	if err := pool.QueryRow(context.Background(), "SELECT to_regnamespace($1) IS NOT NULL", pgx.Identifier{schema}.Sanitize()).Scan(&exists); err != nil || exists {
		t.Errorf("schema created = %v, %v; want nothing created", exists, err)
	}
}
