package redisstore

import (
	"fmt"
	"strings"

	"github.com/ratepace/pace"
)

// The five namespaces of the Store, as the suffix after the hash tag.
const (
	nsBucket = ":b" // token bucket: the TAT
	nsSlot   = ":s" // plain slot counter
	nsBurst  = ":u" // burst slot state
	nsValue  = ":v" // memoised value
	nsTake   = ":t" // the shapes of Take and Refund: reorder count, arrival times
)

// keyer builds the Redis keys of one user key. Every key of user key k is
//
//	prefix + "{" + tag(k) + "}" + namespace
//
// so the five namespaces of k share one Redis Cluster hash slot (the slot of
// the text between the first "{" and the first "}" after it), and a script
// may touch them together. tag(k) is k itself, unless k starts with "}" or
// "\": then it is "\" + k. The escape keeps the tag from being empty (Redis
// hashes the whole key when "{}" is empty, which would scatter the
// namespaces) and keeps the mapping one-to-one. With WithHashedKeys, tag(k)
// is instead the keyed hash of k (see hasher), which holds no brace.
type keyer struct {
	prefix string
	hash   *hasher // nil: keys in the clear
}

// checkPrefix reports an error wrapping pace.ErrInvalidArgument when prefix
// would leave the hash tag empty: its first "{" is followed at once by "}".
// Any other prefix, braces included, keeps the five keys of a user key in one
// slot; a prefix with a non-empty "{...}" of its own puts every key of the
// store in the slot of that tag.
func checkPrefix(prefix string) error {
	if i := strings.IndexByte(prefix, '{'); i >= 0 && i+1 < len(prefix) && prefix[i+1] == '}' {
		return fmt.Errorf("redisstore: key prefix %+q holds an empty hash tag: %w", prefix, pace.ErrInvalidArgument)
	}
	return nil
}

// key returns the Redis key of user key k in namespace ns.
func (kb keyer) key(k, ns string) string {
	var b strings.Builder
	b.Grow(len(kb.prefix) + len(k) + 3 + len(ns))
	kb.write(&b, k)
	b.WriteString(ns)
	return b.String()
}

// all returns the keys of user key k in the five namespaces.
func (kb keyer) all(k string) []string {
	var b strings.Builder
	kb.write(&b, k)
	base := b.String()
	return []string{base + nsBucket, base + nsSlot, base + nsBurst, base + nsValue, base + nsTake}
}

func (kb keyer) write(b *strings.Builder, k string) {
	b.WriteString(kb.prefix)
	b.WriteByte('{')
	switch {
	case kb.hash != nil:
		kb.hash.write(b, k)
	case k != "" && (k[0] == '}' || k[0] == '\\'):
		b.WriteByte('\\')
		b.WriteString(k)
	default:
		b.WriteString(k)
	}
	b.WriteByte('}')
}

// hashTagOf returns the text of a Redis key that Redis Cluster and a
// go-redis Ring hash to place it: between the first "{" and the first "}"
// after it when that is not empty, else the whole key. Keys with the same
// hash tag live on the same node.
func hashTagOf(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
