package pacer

import "github.com/ratepace/pace/internal/sfv"

// parseSFList parses a structured-field List (RFC 9651) as the rate-limit
// fields use it: each member's Text names it, its parameters carry the
// values. It reports false for anything malformed, in which case the whole
// field must be ignored.
func parseSFList(s string) ([]sfv.Item, bool) {
	items, err := sfv.ParseList(s)
	return items, err == nil
}
