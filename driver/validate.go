package driver

import (
	"fmt"
	"time"
)

// MaxKeyLen is the longest key, in bytes, that the stores accept. A longer
// key is rejected with ErrInvalidArgument rather than hashed or truncated
// silently: keys come from clients, and a megabyte key is an attack, not an
// identifier.
const MaxKeyLen = 4096

// ValidateKey checks the key of every Store method, and is all that Get,
// Delete, ReleaseSlot and ReleaseSlotBurst check: it must be non-empty and
// at most MaxKeyLen bytes.
func ValidateKey(key string) error {
	if why := badKey(key); why != "" {
		return invalid("%s", why)
	}
	return nil
}

// badKey returns what is wrong with key, or "" when nothing is.
func badKey(key string) string {
	switch {
	case key == "":
		return "empty key"
	case len(key) > MaxKeyLen:
		return fmt.Sprintf("key of %d bytes exceeds MaxKeyLen (%d)", len(key), MaxKeyLen)
	}
	return ""
}

// ValidateSet checks the arguments of Store.Set: the key, and a ttl that is
// not negative (0 means no expiry).
func ValidateSet(key string, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return validateTTL(ttl)
}

// validateTTL checks a TTL that may be zero (no expiry) but not negative.
func validateTTL(ttl time.Duration) error {
	if ttl < 0 {
		return invalid("negative ttl %v", ttl)
	}
	return nil
}

// ValidateTokenBucket checks the arguments of Store.TokenBucket and returns
// the Shape they describe. See NewShape for the rules.
func ValidateTokenBucket(key string, capacity, refillPerSec, cost float64) (Shape, error) {
	if err := ValidateKey(key); err != nil {
		return Shape{}, err
	}
	return NewShape(capacity, refillPerSec, cost)
}

// ValidateSlot checks the arguments of Store.AcquireSlot: limit at least one
// and ttl above zero (an idle counter must expire).
func ValidateSlot(key string, limit int64, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if limit < 1 {
		return invalid("slot limit %d < 1", limit)
	}
	return validateSlotTTL(ttl)
}

// ValidateSlotBurst checks the arguments of Store.AcquireSlotBurst:
// sustained at least one, sustained ≤ ceiling ≤ 2 × sustained, a burst budget
// that is not negative, and ttl above zero.
func ValidateSlotBurst(key string, sustained, ceiling int64, burstBudget, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if sustained < 1 {
		return invalid("sustained %d < 1", sustained)
	}
	if ceiling < sustained || ceiling-sustained > sustained { // not 2*sustained: that overflows
		return invalid("ceiling %d outside [sustained, 2*sustained] for sustained %d", ceiling, sustained)
	}
	if burstBudget < 0 {
		return invalid("negative burst budget %v", burstBudget)
	}
	return validateSlotTTL(ttl)
}

// ValidateRefresh checks the arguments of Store.RefreshSlot and
// Store.RefreshSlotBurst: the key, and ttl above zero.
func ValidateRefresh(key string, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return validateSlotTTL(ttl)
}

func validateSlotTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return invalid("slot ttl %v must be above zero", ttl)
	}
	return nil
}
