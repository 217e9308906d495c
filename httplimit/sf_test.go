package httplimit_test

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// This file is an independent parser of RFC 8941 structured-field Lists,
// written from the RFC's parsing algorithms (section 4.2), to check the
// headers the middleware sends without trusting its serialiser.

// sfItem is a List member: a bare item with parameters, in order.
type sfItem struct {
	value  any // int64, float64, string (String), sfToken, []byte, bool
	params []sfParam
}

type sfParam struct {
	key   string
	value any
}

type sfToken string

func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.params {
		if p.key == key {
			return p.value, true
		}
	}
	return nil, false
}

// intParam returns the Integer parameter key, failing the test when it is
// absent or not an Integer.
func (it sfItem) intParam(t *testing.T, key string) int64 {
	t.Helper()
	v, ok := it.param(key)
	if !ok {
		t.Fatalf("item %v has no parameter %q", it.value, key)
	}
	n, ok := v.(int64)
	if !ok {
		t.Fatalf("parameter %q = %#v is not an Integer", key, v)
	}
	return n
}

// parseSFList parses the field lines of a List field, combined as RFC 8941
// section 4.2 says (joined with commas).
func parseSFList(lines []string) ([]sfItem, error) {
	p := &sfParser{s: strings.Join(lines, ",")}
	p.skipSP()
	var items []sfItem
	for p.i < len(p.s) {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.skipOWS()
		if p.i == len(p.s) {
			return items, nil
		}
		if p.s[p.i] != ',' {
			return nil, fmt.Errorf("at %d: want ',' after a member", p.i)
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return nil, fmt.Errorf("trailing comma")
		}
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return items, nil
}

type sfParser struct {
	s string
	i int
}

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

func (p *sfParser) item() (sfItem, error) {
	if p.i < len(p.s) && p.s[p.i] == '(' {
		return sfItem{}, fmt.Errorf("at %d: inner lists are not expected here", p.i)
	}
	v, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{value: v}
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var pv any = true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if pv, err = p.bareItem(); err != nil {
				return sfItem{}, err
			}
		}
		replaced := false
		for j := range it.params {
			if it.params[j].key == k {
				it.params[j].value, replaced = pv, true
			}
		}
		if !replaced {
			it.params = append(it.params, sfParam{k, pv})
		}
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.i == len(p.s) || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
		return "", fmt.Errorf("at %d: bad key", p.i)
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-.*", c) >= 0 {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.i == len(p.s) {
		return nil, fmt.Errorf("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return p.token(), nil
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	}
	return nil, fmt.Errorf("at %d: unexpected %q", p.i, p.s[p.i])
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits, dot := 0, -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			digits++
			p.i++
		} else if c == '.' && dot < 0 {
			dot = digits
			p.i++
		} else {
			break
		}
		if dot < 0 && digits > 15 || dot >= 0 && digits > 16 {
			return nil, fmt.Errorf("number too long")
		}
	}
	if digits == 0 {
		return nil, fmt.Errorf("at %d: no digits", start)
	}
	text := p.s[start:p.i]
	if dot < 0 {
		return strconv.ParseInt(text, 10, 64)
	}
	if dot > 12 || strings.HasSuffix(text, ".") || digits-dot > 3 {
		return nil, fmt.Errorf("bad decimal %q", text)
	}
	return strconv.ParseFloat(text, 64)
}

func (p *sfParser) str() (any, error) {
	p.i++ // the opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i == len(p.s) || p.s[p.i] != '"' && p.s[p.i] != '\\' {
				return nil, fmt.Errorf("bad escape in string")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, fmt.Errorf("byte %#x in string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, fmt.Errorf("unterminated string")
}

func (p *sfParser) token() sfToken {
	start := p.i
	p.i++
	for p.i < len(p.s) && (isTokenByte(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return sfToken(p.s[start:p.i])
}

func isTokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) bytes() (any, error) {
	end := strings.IndexByte(p.s[p.i+1:], ':')
	if end < 0 {
		return nil, fmt.Errorf("unterminated byte sequence")
	}
	b, err := base64.StdEncoding.DecodeString(p.s[p.i+1 : p.i+1+end])
	p.i += end + 2
	return b, err
}

func (p *sfParser) boolean() (any, error) {
	if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
		v := p.s[p.i+1] == '1'
		p.i += 2
		return v, nil
	}
	return nil, fmt.Errorf("bad boolean")
}

// TestSFParser checks the checker on the RFC's and the draft's examples.
func TestSFParser(t *testing.T) {
	items, err := parseSFList([]string{`"burst";q=100;w=60,"daily";q=1000;w=86400`, ` "x";r=0;pk=:cHsdsRa894==:;flag`})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || items[0].value != "burst" || items[1].intParam(t, "w") != 86400 || items[2].value != "x" {
		t.Fatalf("parsed %+v", items)
	}
	if v, _ := items[2].param("flag"); v != true {
		t.Fatalf("bare parameter = %v; want true", v)
	}
	for _, bad := range []string{``, `"a",`, `"a";Q=1`, `"unterminated`, `"a";q=1 x`, `"a";q=12345678901234567`, `"\n"`} {
		if _, err := parseSFList([]string{bad}); err == nil {
			t.Errorf("%q parsed; want an error", bad)
		}
	}
}
