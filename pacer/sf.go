package pacer

import "github.com/ratepace/pace/internal/sfv"

// sfItem is one member of a structured-field List (RFC 9651) as the
// rate-limit fields use it: a bare item (kept as text, for matching names)
// and its parameters. Inner lists are rejected: the draft never uses them.
type sfItem struct {
	name string
	sfv.Item
}

func (it sfItem) intParam(key string) (int64, bool) { return it.IntParam(key) }

// parseSFList parses a List. It reports false for anything malformed, in
// which case the whole field must be ignored.
func parseSFList(s string) ([]sfItem, bool) {
	items, err := sfv.ParseList(s)
	if err != nil {
		return nil, false
	}
	out := make([]sfItem, len(items))
	for i, it := range items {
		out[i] = sfItem{name: it.Text, Item: it}
	}
	return out, true
}
