// Package sfv parses structured-field Lists (RFC 9651, which obsoletes
// RFC 8941) as the RateLimit and RateLimit-Policy fields use them: members
// that are bare items with parameters. Inner lists are refused: those
// fields never use them. It serves the pacer, which reads the fields, and
// the tests of httplimit, which check the fields it writes without
// trusting its serialiser.
package sfv

import (
	"errors"
	"strconv"
	"strings"
)

// Limits on what ParseList accepts, so that a hostile field costs little.
const (
	MaxMembers = 65 // members of a List
	MaxParams  = 32 // distinct parameter keys of one member
)

// Kind is the type of a bare item.
type Kind uint8

// The kinds of bare items.
const (
	Integer Kind = iota + 1
	Decimal
	String
	Token
	ByteSequence
	Boolean
)

// Bare is a bare item.
type Bare struct {
	Kind Kind
	Int  int64 // the value of an Integer
	// Text is a String's content; for the other kinds, the item as
	// written: a Token, a number's spelling, a Byte Sequence's base64
	// (unchecked, without the colons), "?0" or "?1".
	Text string
}

// Param is a parameter of a member. A parameter without a value is the
// Boolean true.
type Param struct {
	Key string
	Bare
}

// Item is a member of a List: a bare item and its parameters, in the order
// their keys first appear; a repeated key keeps its last value.
type Item struct {
	Bare
	Params []Param
}

// Param returns the value of the parameter key.
func (it Item) Param(key string) (Bare, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Bare, true
		}
	}
	return Bare{}, false
}

// IntParam returns the parameter key when it is an Integer.
func (it Item) IntParam(key string) (int64, bool) {
	b, ok := it.Param(key)
	if !ok || b.Kind != Integer {
		return 0, false
	}
	return b.Int, true
}

// ErrSyntax is the error of ParseList for a field that is not a List it
// accepts, in which case the whole field must be ignored.
var ErrSyntax = errors.New("sfv: malformed list")

// ParseList parses s, the field's lines joined with commas (RFC 9651
// section 4.2). It returns an error wrapping ErrSyntax, with the byte
// offset where parsing stopped, for anything malformed, for an empty List,
// and for more than MaxMembers members or MaxParams parameters on one.
func ParseList(s string) ([]Item, error) {
	p := parser{s: s}
	p.skipSP()
	var items []Item
	if p.done() {
		return nil, p.fail()
	}
	for !p.done() {
		it, ok := p.item()
		if !ok {
			return nil, p.fail()
		}
		items = append(items, it)
		p.skipOWS()
		if p.done() {
			break
		}
		if p.s[p.i] != ',' {
			return nil, p.fail()
		}
		p.i++
		p.skipOWS()
		if p.done() || len(items) >= MaxMembers {
			return nil, p.fail() // a trailing comma, or too many members
		}
	}
	return items, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) fail() error {
	return &offsetError{at: p.i}
}

type offsetError struct{ at int }

func (e *offsetError) Error() string { return ErrSyntax.Error() + " at byte " + strconv.Itoa(e.at) }
func (e *offsetError) Unwrap() error { return ErrSyntax }

func (p *parser) done() bool { return p.i >= len(p.s) }

func (p *parser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *parser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) item() (Item, bool) {
	b, ok := p.bareItem()
	if !ok {
		return Item{}, false
	}
	it := Item{Bare: b}
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return Item{}, false
		}
		val := Bare{Kind: Boolean, Text: "?1"}
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if val, ok = p.bareItem(); !ok {
				return Item{}, false
			}
		}
		replaced := false
		for j := range it.Params {
			if it.Params[j].Key == key {
				it.Params[j].Bare, replaced = val, true // the last value of a repeated key wins
			}
		}
		if !replaced {
			if len(it.Params) == MaxParams {
				return Item{}, false
			}
			it.Params = append(it.Params, Param{Key: key, Bare: val})
		}
	}
	return it, true
}

func (p *parser) key() (string, bool) {
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
// Boolean.
func (p *parser) bareItem() (Bare, bool) {
	if p.done() {
		return Bare{}, false
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
					return Bare{}, false
				}
				e := p.s[p.i]
				if e != '"' && e != '\\' {
					return Bare{}, false
				}
				b.WriteByte(e)
				p.i++
			case c == '"':
				return Bare{Kind: String, Text: b.String()}, true
			case c < 0x20 || c > 0x7e:
				return Bare{}, false
			default:
				b.WriteByte(c)
			}
		}
		return Bare{}, false
	case c == ':':
		p.i++
		start := p.i
		for p.i < len(p.s) && p.s[p.i] != ':' {
			c := p.s[p.i]
			if !((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/' || c == '=') {
				return Bare{}, false
			}
			p.i++
		}
		if p.done() {
			return Bare{}, false
		}
		text := p.s[start:p.i]
		p.i++
		return Bare{Kind: ByteSequence, Text: text}, true
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return Bare{Kind: Boolean, Text: p.s[p.i-2 : p.i]}, true
		}
		return Bare{}, false
	case (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '*':
		start := p.i
		p.i++
		for p.i < len(p.s) && isTokenChar(p.s[p.i]) {
			p.i++
		}
		return Bare{Kind: Token, Text: p.s[start:p.i]}, true
	}
	return Bare{}, false
}

func isTokenChar(c byte) bool {
	if (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 3 fractional digits), as RFC 9651 bounds them.
func (p *parser) number() (Bare, bool) {
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
		return Bare{}, false
	}
	if dot {
		return Bare{Kind: Decimal, Text: text}, true
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return Bare{}, false
	}
	return Bare{Kind: Integer, Int: n, Text: text}, true
}
