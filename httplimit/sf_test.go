package httplimit_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ratepace/pace/internal/sfv"
)

// The headers the middleware sends are read back with internal/sfv, a
// structured-field parser written from RFC 9651's parsing algorithms and
// shared with the pacer, not with httplimit's serialiser.

// sfItem is a List member, with its bare item as a Go value.
type sfItem struct {
	value any // int64, float64, string (String), sfToken, sfBytes, bool
	sfv.Item
}

type (
	sfToken string
	sfBytes string // base64, unchecked
)

// goValue returns b as the Go value sfItem.value holds.
func goValue(b sfv.Bare) any {
	switch b.Kind {
	case sfv.Integer:
		return b.Int
	case sfv.Decimal:
		f, _ := strconv.ParseFloat(b.Text, 64) // sfv checked the spelling
		return f
	case sfv.String:
		return b.Text
	case sfv.Token:
		return sfToken(b.Text)
	case sfv.ByteSequence:
		return sfBytes(b.Text)
	default:
		return b.Text == "?1"
	}
}

// intParam returns the Integer parameter key, failing the test when it is
// absent or not an Integer.
func (it sfItem) intParam(t *testing.T, key string) int64 {
	t.Helper()
	v, ok := it.Param(key)
	if !ok {
		t.Fatalf("item %v has no parameter %q", it.value, key)
	}
	if v.Kind != sfv.Integer {
		t.Fatalf("parameter %q = %#v is not an Integer", key, v)
	}
	return v.Int
}

// parseSFList parses the field lines of a List field, combined as RFC 9651
// section 4.2 says (joined with commas).
func parseSFList(lines []string) ([]sfItem, error) {
	items, err := sfv.ParseList(strings.Join(lines, ","))
	if err != nil {
		return nil, err
	}
	out := make([]sfItem, len(items))
	for i, it := range items {
		out[i] = sfItem{value: goValue(it.Bare), Item: it}
	}
	return out, nil
}
