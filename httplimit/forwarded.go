package httplimit

import (
	"net/netip"
	"strings"
)

// maxHops bounds the elements of a Forwarded header that ClientIP walks
// from the right: more trusted proxies than that in one chain is a
// misconfiguration or an attack, and is answered 400.
const maxHops = 16

// walkXFF returns the client named by X-Forwarded-For field lines: walking
// from the right (the last line's last entry), the first address that is
// not trusted, or the leftmost one when all are. Empty list elements are
// ignored, as RFC 9110 asks of every list; an entry reached on the walk that
// is not an IP address (a host name, "unknown") is an error, as is a header
// with no entry at all. Entries to the left of the deciding one are never
// read: they may be anything a client chose to send.
func walkXFF(lines []string, trusted func(netip.Addr) bool) (netip.Addr, error) {
	if totalLen(lines) > maxForwardedLen {
		return netip.Addr{}, errFwdTooLong
	}
	var last netip.Addr
	for l := len(lines) - 1; l >= 0; l-- {
		line := lines[l]
		for end := len(line); end >= 0; {
			i := strings.LastIndexByte(line[:end], ',')
			entry := trimOWS(line[i+1 : end])
			end = i // -1 after the line's first entry
			if entry == "" {
				continue
			}
			a, ok := parseXFFNode(entry)
			if !ok {
				return netip.Addr{}, errMalformedFwd
			}
			if !trusted(a) {
				return a, nil
			}
			last = a
		}
	}
	if !last.IsValid() {
		return netip.Addr{}, errMalformedFwd
	}
	return last, nil
}

// parseXFFNode parses one X-Forwarded-For entry: an IPv4 or IPv6 address,
// optionally bracketed (IPv6), with an optional port after an IPv4 or a
// bracketed IPv6 address.
func parseXFFNode(s string) (netip.Addr, bool) { return parseNode(s, true, false) }

// parseNode parses an address with an optional port: an IPv4 address, or
// a bracketed IPv6 address, or (when bare is set) an IPv6 address without
// brackets or port; the port is digits, or with obfuscated set also an
// obfuscated port of RFC 7239.
func parseNode(s string, bare, obfuscated bool) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		j := strings.IndexByte(s, ']')
		if j < 0 {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:j])
		if err != nil || !a.Is6() || !validPort(s[j+1:], obfuscated) {
			return netip.Addr{}, false
		}
		return normal(a), true
	}
	if bare {
		if a, err := netip.ParseAddr(s); err == nil {
			return normal(a), true
		}
	}
	host, port := s, ""
	if i := strings.IndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i:]
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() || !validPort(port, obfuscated) {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort reports whether s is empty or ":" followed by a port of one to
// five digits, or, when obfuscated ports are allowed (RFC 7239), by "_" and
// one or more of ALPHA, DIGIT, ".", "_", "-".
func validPort(s string, obfuscated bool) bool {
	if s == "" {
		return true
	}
	if s[0] != ':' || len(s) < 2 {
		return false
	}
	p := s[1:]
	if obfuscated && p[0] == '_' {
		if len(p) < 2 {
			return false
		}
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
				return false
			}
		}
		return true
	}
	if len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// fwdElement is what walkForwarded keeps of one element of a Forwarded
// header: its "for" value, or that it has none usable.
type fwdElement struct {
	node string // the value of "for", unquoted
	bad  bool   // no "for", "for" twice, or a quoted value with escapes
}

// walkForwarded returns the client named by Forwarded field lines (RFC
// 7239): walking the elements from the right, the first "for" node that is
// not trusted, or the leftmost one when all are.
//
// Every line is parsed whole and strictly (RFC 7239 section 4, with the
// list and quoting rules of RFC 9110): a client can write what it likes to
// the left of what its proxies append, but any syntax error, an unterminated
// quoted string included, fails the whole header, so nothing a client
// writes can shift where the proxies' elements begin. The element at the
// deciding position must have exactly one "for" parameter naming an IP
// address (IPv6 in brackets, an optional port); "unknown", an obfuscated
// node ("_hidden") and anything else is an error.
func walkForwarded(lines []string, trusted func(netip.Addr) bool) (netip.Addr, error) {
	if totalLen(lines) > maxForwardedLen {
		return netip.Addr{}, errFwdTooLong
	}
	var ring [maxHops]fwdElement // the last maxHops elements
	n := 0
	for _, line := range lines {
		if !parseForwarded(line, func(e fwdElement) { ring[n%maxHops] = e; n++ }) {
			return netip.Addr{}, errMalformedFwd
		}
	}
	var last netip.Addr
	for i := 1; i <= min(n, maxHops); i++ {
		e := ring[(n-i)%maxHops]
		if e.bad {
			return netip.Addr{}, errMalformedFwd
		}
		a, ok := parseForwardedNode(e.node)
		if !ok {
			return netip.Addr{}, errMalformedFwd
		}
		if !trusted(a) {
			return a, nil
		}
		last = a
	}
	switch {
	case n == 0:
		return netip.Addr{}, errMalformedFwd
	case n > maxHops:
		return netip.Addr{}, errFwdTooManyHops
	}
	return last, nil
}

// parseForwarded parses one Forwarded field line and calls add with each of
// its non-empty elements, left to right. It reports whether the line is
// well formed:
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// Optional white space is accepted around "," and ";".
func parseForwarded(s string, add func(fwdElement)) bool {
	pos := 0
	for {
		var e fwdElement
		pairs := 0
		for {
			pos = skipOWS(s, pos)
			if pos == len(s) || s[pos] == ',' {
				break
			}
			if s[pos] == ';' {
				pos++
				continue
			}
			start := pos
			for pos < len(s) && isTchar(s[pos]) {
				pos++
			}
			name := s[start:pos]
			if name == "" || pos == len(s) || s[pos] != '=' {
				return false
			}
			pos++
			var value string
			var escaped, ok bool
			if value, escaped, pos, ok = parseValue(s, pos); !ok {
				return false
			}
			pairs++
			if strings.EqualFold(name, "for") {
				if e.node != "" || e.bad {
					e.bad = true // a parameter occurs at most once per element
				} else {
					e.node, e.bad = value, escaped || value == ""
				}
			}
			pos = skipOWS(s, pos)
			if pos == len(s) || s[pos] == ',' {
				break
			}
			if s[pos] != ';' {
				return false
			}
			pos++
		}
		if pairs > 0 {
			if e.node == "" {
				e.bad = true
			}
			add(e)
		}
		if pos == len(s) {
			return true
		}
		pos++ // the comma
	}
}

// parseValue parses a token or a quoted string at s[pos:], and returns its
// value (the quoted string without its quotes), whether it held a
// quoted-pair (the value is then returned raw and must not be trusted), and
// the position after it.
func parseValue(s string, pos int) (value string, escaped bool, next int, ok bool) {
	if pos < len(s) && s[pos] == '"' {
		start := pos + 1
		for i := start; i < len(s); i++ {
			switch c := s[i]; {
			case c == '"':
				return s[start:i], escaped, i + 1, true
			case c == '\\':
				if i+1 == len(s) || !isQuotedPairChar(s[i+1]) {
					return "", false, 0, false
				}
				escaped = true
				i++
			case !isQdtext(c):
				return "", false, 0, false
			}
		}
		return "", false, 0, false // unterminated
	}
	start := pos
	for pos < len(s) && isTchar(s[pos]) {
		pos++
	}
	if pos == start {
		return "", false, 0, false
	}
	return s[start:pos], false, pos, true
}

// parseForwardedNode parses a "for" node of RFC 7239 section 6: an IPv4
// address or a bracketed IPv6 address, with an optional port (digits, or an
// obfuscated port). "unknown" and obfuscated node names are not addresses.
func parseForwardedNode(v string) (netip.Addr, bool) { return parseNode(v, false, true) }

func totalLen(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	return n
}

func skipOWS(s string, pos int) int {
	for pos < len(s) && (s[pos] == ' ' || s[pos] == '\t') {
		pos++
	}
	return pos
}

func trimOWS(s string) string {
	return strings.Trim(s, " \t")
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isQdtext reports whether c may stand unescaped in a quoted string (RFC
// 9110 section 5.6.4).
func isQdtext(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || 0x23 <= c && c <= 0x5B || 0x5D <= c && c <= 0x7E || c >= 0x80
}

// isQuotedPairChar reports whether c may follow a backslash in a quoted
// string.
func isQuotedPairChar(c byte) bool {
	return c == '\t' || c == ' ' || 0x21 <= c && c <= 0x7E || c >= 0x80
}
