package pacer

import (
	"strconv"
	"strings"
)

// sfItem is one member of a structured-field List (RFC 9651) as the
// rate-limit fields use it: a bare item (kept as text, for matching names)
// and its parameters. Inner lists are rejected: the draft never uses them.
type sfItem struct {
	name   string
	params map[string]sfValue
}

// sfValue is a parameter's bare item: an Integer (isInt) or anything else
// (kept as text).
type sfValue struct {
	i     int64
	isInt bool
}

func (it sfItem) intParam(key string) (int64, bool) {
	v, ok := it.params[key]
	if !ok || !v.isInt {
		return 0, false
	}
	return v.i, true
}

// parseSFList parses a List. It reports false for anything malformed, in
// which case the whole field must be ignored.
func parseSFList(s string) ([]sfItem, bool) {
	p := sfParser{s: s}
	p.skipSP()
	var items []sfItem
	if p.done() {
		return nil, false
	}
	for !p.done() {
		it, ok := p.item()
		if !ok {
			return nil, false
		}
		items = append(items, it)
		p.skipOWS()
		if p.done() {
			break
		}
		if p.s[p.i] != ',' {
			return nil, false
		}
		p.i++
		p.skipOWS()
		if p.done() {
			return nil, false // trailing comma
		}
		if len(items) > 64 {
			return nil, false // nobody needs that many policies
		}
	}
	return items, true
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, bool) {
	_, text, ok := p.bareItem()
	if !ok {
		return sfItem{}, false
	}
	it := sfItem{name: text, params: map[string]sfValue{}}
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return sfItem{}, false
		}
		val := sfValue{}
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			val, _, ok = p.bareItem()
			if !ok {
				return sfItem{}, false
			}
		}
		it.params[key] = val // the last value of a repeated key wins (RFC 9651)
		if len(it.params) > 32 {
			return sfItem{}, false
		}
	}
	return it, true
}

func (p *sfParser) key() (string, bool) {
	start := p.i
	if p.done() {
		return "", false
	}
	c := p.s[p.i]
	if !(c >= 'a' && c <= 'z') && c != '*' {
		return "", false
	}
	p.i++
	for p.i < len(p.s) {
		c := p.s[p.i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' || c == '*' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], true
}

// bareItem parses an Integer, Decimal, String, Token, Byte Sequence or
// Boolean. text is the item as a name: a String's content, a Token's or
// number's spelling.
func (p *sfParser) bareItem() (sfValue, string, bool) {
	if p.done() {
		return sfValue{}, "", false
	}
	c := p.s[p.i]
	switch {
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == '"':
		p.i++
		var b strings.Builder
		for p.i < len(p.s) {
			c := p.s[p.i]
			p.i++
			switch {
			case c == '\\':
				if p.done() {
					return sfValue{}, "", false
				}
				e := p.s[p.i]
				if e != '"' && e != '\\' {
					return sfValue{}, "", false
				}
				b.WriteByte(e)
				p.i++
			case c == '"':
				return sfValue{}, b.String(), true
			case c < 0x20 || c > 0x7e:
				return sfValue{}, "", false
			default:
				b.WriteByte(c)
			}
		}
		return sfValue{}, "", false
	case c == ':':
		p.i++
		start := p.i
		for p.i < len(p.s) && p.s[p.i] != ':' {
			c := p.s[p.i]
			if !((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/' || c == '=') {
				return sfValue{}, "", false
			}
			p.i++
		}
		if p.done() {
			return sfValue{}, "", false
		}
		text := p.s[start:p.i]
		p.i++
		return sfValue{}, text, true
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return sfValue{}, p.s[p.i-2 : p.i], true
		}
		return sfValue{}, "", false
	case (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '*':
		start := p.i
		p.i++
		for p.i < len(p.s) && isTokenChar(p.s[p.i]) {
			p.i++
		}
		return sfValue{}, p.s[start:p.i], true
	}
	return sfValue{}, "", false
}

func isTokenChar(c byte) bool {
	if (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 3 fractional digits), as RFC 9651 bounds them.
func (p *sfParser) number() (sfValue, string, bool) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits, frac, dot := 0, 0, false
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			if dot {
				frac++
			} else {
				digits++
			}
			p.i++
			continue
		}
		if c == '.' && !dot && digits > 0 {
			dot = true
			p.i++
			continue
		}
		break
	}
	text := p.s[start:p.i]
	if digits == 0 || (dot && (frac == 0 || frac > 3 || digits > 12)) || (!dot && digits > 15) {
		return sfValue{}, "", false
	}
	if dot {
		return sfValue{}, text, true
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return sfValue{}, "", false
	}
	return sfValue{i: n, isInt: true}, text, true
}
