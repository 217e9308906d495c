package redisstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strings"
	"sync"
)

// MinKeySecret is the shortest secret WithHashedKeys accepts, in bytes.
const MinKeySecret = 16

// hashedTagLen is the length of a hashed tag: 128 bits in unpadded base64.
const hashedTagLen = 22

// hasher writes the hash tag of a user key under WithHashedKeys: the first
// 128 bits of HMAC-SHA-256(secret, key), in unpadded standard base64 (which
// holds no brace, so the tag needs no escape). It is safe for concurrent
// use: each call borrows a MAC from a pool.
type hasher struct {
	pool sync.Pool // of *mac
}

// mac is one HMAC state with a buffer for the key, so that hashing a string
// does not allocate.
type mac struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

func newHasher(secret []byte) *hasher {
	key := append([]byte(nil), secret...) // the caller may reuse its slice
	h := new(hasher)
	h.pool.New = func() any { return &mac{h: hmac.New(sha256.New, key)} }
	return h
}

func (hs *hasher) write(b *strings.Builder, k string) {
	m := hs.pool.Get().(*mac)
	m.h.Reset()
	m.buf = append(m.buf[:0], k...)
	m.h.Write(m.buf)
	sum := m.h.Sum(m.sum[:0])
	var tag [hashedTagLen]byte
	base64.RawStdEncoding.Encode(tag[:], sum[:16])
	hs.pool.Put(m) // keys are validated first: buf holds at most driver.MaxKeyLen bytes
	b.Write(tag[:])
}
