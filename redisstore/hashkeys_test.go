package redisstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/takemodel"
	"github.com/ratepace/pace/storetest"
	"github.com/redis/go-redis/v9"
)

const testSecret = "0123456789abcdef0123456789abcdef"

// TestContractHashedKeys runs the contract suite on a Store that hashes its
// keys.
func TestContractHashedKeys(t *testing.T) {
	c := testClient(t)
	storetest.Run(t, func(t *testing.T) pace.Store {
		return mustNew(t, c, WithPrefix(testPrefix(t, c)), WithHashedKeys([]byte(testSecret)))
	})
	storetest.RunTaker(t, func(t *testing.T) storetest.TakeStore {
		return mustNew(t, c, WithPrefix(testPrefix(t, c)), WithHashedKeys([]byte(testSecret)))
	})
}

// TestHashedKeysHideClientIDs writes a client id in all five namespaces
// through a Store with hashed keys and reads back every key under its
// prefix: each is prefix{tag}:ns with the tag HMAC-SHA-256(secret, id)
// truncated to 128 bits in base64, the five share it (one Cluster slot),
// and no key or stored state holds the id. A Store with the same secret
// shares the state; one with another secret does not.
func TestHashedKeysHideClientIDs(t *testing.T) {
	c := testClient(t)
	prefix := testPrefix(t, c)
	secret := []byte(testSecret)
	s := mustNew(t, c, WithPrefix(prefix), WithHashedKeys(secret))
	ctx := context.Background()
	const id = "client-42@203.0.113.7"
	shapes := takemodel.WriteAll(t, s, id)

	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id))
	tag := base64.RawStdEncoding.EncodeToString(mac.Sum(nil)[:16])
	layout := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `\{` + regexp.QuoteMeta(tag) + `\}:[bsuvt]$`)
	var keys []string
	iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 5 {
		t.Fatalf("keys under the prefix: %q; want one per namespace", keys)
	}
	for _, k := range keys {
		if !layout.MatchString(k) {
			t.Errorf("key %q; want %s", k, layout)
		}
		if v, err := c.Get(ctx, k).Result(); err != nil || strings.Contains(k+v, "client-42") || strings.Contains(k+v, "203.0.113.7") {
			t.Errorf("key %q holds %q (err %v); want neither to show the client id", k, v, err)
		}
	}

	same := mustNew(t, c, WithPrefix(prefix), WithHashedKeys(secret))
	if g, err := same.Take(ctx, id, shapes); g.OK || err != nil {
		t.Errorf("Take through a Store with the same secret = %+v, %v; want refused (the key's one take is spent)", g, err)
	}
	other := mustNew(t, c, WithPrefix(prefix), WithHashedKeys([]byte(strings.ToUpper(testSecret))))
	if g, err := other.Take(ctx, id, shapes); !g.OK || err != nil {
		t.Errorf("Take through a Store with another secret = %+v, %v; want OK (another key)", g, err)
	}
}

// TestHashedKeysShortSecret checks that New refuses a secret shorter than
// MinKeySecret with ErrInvalidArgument, and that the Store keeps its own
// copy of the secret.
func TestHashedKeysShortSecret(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { c.Close() })
	for _, secret := range [][]byte{nil, {}, []byte("fifteen bytes!!")} {
		if s, err := New(c, WithHashedKeys(secret)); s != nil || !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("New(WithHashedKeys(%d bytes)) = %v, %v; want nil and an error wrapping ErrInvalidArgument", len(secret), s, err)
		}
	}
	secret := []byte(testSecret)
	s := mustNew(t, c, WithHashedKeys(secret))
	before := s.keys.key("k", nsTake)
	secret[0] ^= 1
	if after := s.keys.key("k", nsTake); after != before {
		t.Errorf("changing the caller's secret slice changed the key from %q to %q", before, after)
	}
}
