package httplimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/ratepace/pace"
)

// KeyFunc returns the key a limit counts a request against: a client's
// address, a client id, an API key. It is called once per limit and request,
// from the request's goroutine, before the handler runs, and must be safe for
// concurrent use. An error stops the request (see KeyError); the request is
// never counted against a key made up in its place.
type KeyFunc func(r *http.Request) (string, error)

// MaxKeyLen is the longest key, in bytes, that a limit accepts. A longer key,
// and an empty one, is a key error answered 400: keys come from clients, and
// a megabyte key is an attack, not an identifier. It leaves room, below
// driver.MaxKeyLen, for the prefix a Store limit adds (see Bucket).
const MaxKeyLen = 1024

// KeyError is the error of a key function of this package, and of the
// middleware when a key is empty or too long: what the request lacks, and
// the HTTP status the default answer uses (400, 413 for a body over the
// bound, 500 for a server-side fault such as a connection address that is
// not an IP). Reason never contains text the client sent. Key functions of
// your own may return a *KeyError to choose the status.
type KeyError struct {
	Status int    // the status of the default answer
	Reason string // what is wrong, without client-supplied text
	Err    error  // the cause, if any (pace.ErrInvalidArgument for a bad configuration)
}

// Error returns "httplimit: " followed by the reason.
func (e *KeyError) Error() string { return "httplimit: " + e.Reason }

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

func badRequest(reason string) *KeyError {
	return &KeyError{Status: http.StatusBadRequest, Reason: reason}
}

// Key errors that carry no per-request data are allocated once.
var (
	errNoHeader       = badRequest("the key header is absent or empty")
	errManyHeaders    = badRequest("the key header appears more than once")
	errKeyTooLong     = badRequest("the key is longer than MaxKeyLen")
	errEmptyKey       = badRequest("the key is empty")
	errNoClientID     = badRequest("no client id: neither HTTP Basic credentials nor a client_id parameter")
	errBadBasic       = badRequest("malformed HTTP Basic credentials")
	errBadClientID    = badRequest("the client id is not validly URL-encoded")
	errManyClientIDs  = badRequest("client_id appears more than once in the query or the body")
	errTwoClientIDs   = badRequest("the request names different clients (HTTP Basic credentials, the query, the body)")
	errBadForm        = badRequest("malformed form body")
	errBodyRead       = badRequest("the request body could not be read")
	errBodyTooLarge   = &KeyError{Status: http.StatusRequestEntityTooLarge, Reason: "the request body is larger than the bound for reading a client id"}
	errRemoteNotIP    = &KeyError{Status: http.StatusInternalServerError, Reason: "the connection address is not an IP address"}
	errMalformedFwd   = badRequest("malformed, unknown or obfuscated client address in a forwarding header")
	errFwdTooLong     = badRequest("forwarding header longer than the bound")
	errFwdConflict    = badRequest("Forwarded and X-Forwarded-For name different clients")
	errFwdTooManyHops = badRequest("more trusted hops in the forwarding header than the bound")
	errInvalidHeader  = &KeyError{Status: http.StatusInternalServerError, Reason: "Header: invalid header name", Err: pace.ErrInvalidArgument}
	errInvalidTrusted = &KeyError{Status: http.StatusInternalServerError, Reason: "ClientIP: invalid trusted prefix", Err: pace.ErrInvalidArgument}
)

// invalidf returns a configuration error wrapping pace.ErrInvalidArgument.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("httplimit: "+format+": %w", append(args, pace.ErrInvalidArgument)...)
}

// Header returns a KeyFunc whose key is the value of the request header
// name (an API key, say). The header must be present exactly once, and its
// value non-empty and at most MaxKeyLen bytes; otherwise the error is a
// *KeyError answered 400. An empty or invalid name makes every call fail
// with a *KeyError wrapping pace.ErrInvalidArgument, answered 500.
func Header(name string) KeyFunc {
	if !validToken(name) {
		return func(*http.Request) (string, error) { return "", errInvalidHeader }
	}
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header[name]
		switch {
		case len(v) == 0 || v[0] == "":
			return "", errNoHeader
		case len(v) > 1:
			return "", errManyHeaders
		case len(v[0]) > MaxKeyLen:
			return "", errKeyTooLong
		}
		return v[0], nil
	}
}

// DefaultMaxFormBody is the largest request body, in bytes, that ClientID
// reads to find a client_id form field: 64 KiB, far above any token
// request.
const DefaultMaxFormBody = 64 << 10

// ClientID returns a KeyFunc whose key is the OAuth 2.0 client id of the
// request (RFC 6749, section 2.3.1): the user name of HTTP Basic credentials
// (URL-decoded), or the client_id parameter, wherever net/http would hand
// one to a handler that reads r.FormValue, r.PostFormValue or
// r.MultipartForm: the URL query, an application/x-www-form-urlencoded
// POST, PUT or PATCH body, a multipart/form-data body. Bodies are read
// without consuming them (the handler still reads the body or parses the
// form). Every client id the request carries must be the same, or the
// request is refused (RFC 6749 section 2.3: one authentication method per
// request), so the key is the client the handler authenticates. A body
// above DefaultMaxFormBody is a *KeyError answered 413 (see
// ClientIDMaxBody); no client id, an empty or overlong one, two that
// differ, or malformed credentials or body are *KeyErrors answered 400.
// Put ClientID's limit after the cheap ones (ClientIP), so that a flood is
// refused before its bodies are read. docs/httplimit.md has the details.
func ClientID() KeyFunc { return clientID(DefaultMaxFormBody) }

// ClientIDMaxBody is ClientID with a bound of maxBytes on the body it reads.
// maxBytes must be at least 1; otherwise the error wraps
// pace.ErrInvalidArgument.
func ClientIDMaxBody(maxBytes int64) (KeyFunc, error) {
	if maxBytes < 1 {
		return nil, invalidf("ClientIDMaxBody: bound %d below 1 byte", maxBytes)
	}
	return clientID(maxBytes), nil
}

func clientID(maxBody int64) KeyFunc {
	return func(r *http.Request) (string, error) {
		var c claims
		if auth := r.Header.Get("Authorization"); len(auth) >= 6 && strings.EqualFold(auth[:6], "Basic ") {
			user, _, ok := r.BasicAuth()
			if !ok {
				return "", errBadBasic
			}
			id, err := url.QueryUnescape(user)
			if err != nil {
				return "", errBadClientID
			}
			c.add([]string{id})
		}
		if r.URL != nil && r.URL.RawQuery != "" {
			// The values net/http's ParseForm keeps, which skips pairs it
			// cannot parse.
			q, _ := url.ParseQuery(r.URL.RawQuery)
			c.add(q["client_id"])
		}
		if err := c.addBody(r, maxBody); err != nil {
			return "", err
		}
		switch {
		case c.err != nil:
			return "", c.err
		case c.n == 0:
			return "", errNoClientID
		}
		return checkKey(c.id)
	}
}

// claims gathers the client ids a request carries: they must be one.
type claims struct {
	id  string
	n   int   // places that named a client
	err error // two ids in one place, or two places naming different clients
}

// add adds the client ids of one place.
func (c *claims) add(ids []string) {
	switch {
	case len(ids) == 0 || c.err != nil:
		return
	case len(ids) > 1:
		c.err = errManyClientIDs
	case c.n > 0 && ids[0] != c.id:
		c.err = errTwoClientIDs
	}
	c.id = ids[0]
	c.n++
}

// addBody adds the client ids of r's body, read as net/http's ParseForm
// (an urlencoded body of a POST, PUT or PATCH) and ParseMultipartForm (a
// multipart/form-data body, whatever the method) read it, or of the form
// already parsed.
func (c *claims) addBody(r *http.Request, maxBody int64) error {
	if r.PostForm != nil { // parsed already, the body consumed
		c.add(r.PostForm["client_id"])
		if r.MultipartForm != nil {
			return nil // its values are in PostForm
		}
	}
	// As net/http does: a malformed parameter ("...; charset") makes
	// ParseMediaType return the media type with ErrInvalidMediaParameter;
	// parsePostForm still reads an urlencoded body of that type, while
	// ParseMultipartForm (multipartReader) reads no multipart body.
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case ct == "application/x-www-form-urlencoded" && r.PostForm == nil && formMethod(r.Method):
		buf, err := peekBody(r, maxBody)
		if err != nil {
			return err
		}
		form, err := url.ParseQuery(string(buf))
		if err != nil {
			return errBadForm
		}
		c.add(form["client_id"])
	case ct == "multipart/form-data" && err == nil:
		if params["boundary"] == "" {
			return errBadForm
		}
		buf, err := peekBody(r, maxBody)
		if err != nil {
			return err
		}
		ids, err := multipartIDs(buf, params["boundary"])
		if err != nil {
			return errBadForm
		}
		c.add(ids)
	}
	return nil
}

// formMethod reports whether net/http's ParseForm reads the body of a
// request of this method (POST, PUT, PATCH): ClientID reads the form the
// handler will see, and no other.
func formMethod(m string) bool {
	return m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch
}

// checkKey returns key, or the error for an empty or overlong one.
func checkKey(key string) (string, error) {
	switch {
	case key == "":
		return "", errEmptyKey
	case len(key) > MaxKeyLen:
		return "", errKeyTooLong
	}
	return key, nil
}

// peekBody reads r's body, at most maxBody bytes, and puts the bytes back
// so that the handler reads them again. A request without a body has none.
func peekBody(r *http.Request, maxBody int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > maxBody {
		return nil, errBodyTooLarge
	}
	body := r.Body
	buf, err := io.ReadAll(io.LimitReader(body, maxBody+1))
	// Whatever was read goes back, so that the handler sees the body as it
	// came even when it is refused here.
	r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), body), Closer: body}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, errBodyTooLarge
		}
		return nil, errBodyRead
	}
	if int64(len(buf)) > maxBody {
		return nil, errBodyTooLarge
	}
	return buf, nil
}

// multipartIDs returns the values of the client_id fields of a
// multipart/form-data body, as mime/multipart's ReadForm (under
// ParseMultipartForm) reads them: parts named by their Content-Disposition
// (transfer encodings decoded), a part with a file name being a file, not
// a value.
func multipartIDs(body []byte, boundary string) ([]string, error) {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var ids []string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return ids, nil
		}
		if err != nil {
			return nil, err
		}
		if p.FormName() == "client_id" && p.FileName() == "" {
			v, err := io.ReadAll(p)
			if err != nil {
				return nil, err
			}
			ids = append(ids, string(v))
		}
		p.Close()
	}
}

// replayBody is a request body whose first bytes were read by ClientID:
// it reads them again, then the rest, and closes the original body.
type replayBody struct {
	io.Reader
	io.Closer
}

// ClientIP returns a KeyFunc whose key is the client's IP address, which a
// client cannot choose. With no trusted prefixes it is the address of the
// connection, and every forwarding header is ignored. With trusted prefixes
// (your load balancers and reverse proxies), a request from a trusted
// address is keyed by the Forwarded (RFC 7239) and X-Forwarded-For headers
// walked from the right, skipping trusted hops: whatever a client wrote
// stands to the left of what its first proxy appended. A malformed or
// conflicting entry is a *KeyError answered 400 (ClientIPWith and
// ProxyHeader name the one header your proxies write). IPv4-mapped
// addresses and IPv4 addresses behind NAT64's well-known prefix
// 64:ff9b::/96 are keyed by their IPv4 address; other IPv6 addresses are
// grouped by /64 (IPv6Bits); trusted prefixes are read the same way (see
// TrustProxies). ClientIP has no error result: an invalid prefix in trusted
// (the zero netip.Prefix, ::ffff:0:0/96, 64:ff9b::/96) makes every call
// fail with a *KeyError wrapping pace.ErrInvalidArgument, answered 500;
// ClientIPWith reports it at once. docs/httplimit.md has the rules in full.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	c, err := newIPConfig([]Option{TrustProxies(trusted...)})
	if err != nil {
		return func(*http.Request) (string, error) { return "", errInvalidTrusted }
	}
	return c.key
}

// TrustProxies names the addresses of the proxies whose forwarding headers
// ClientIPWith believes (see ClientIP). Prefixes accumulate over several
// TrustProxies; each must be valid (not the zero netip.Prefix). A prefix
// inside ::ffff:0:0/96 or 64:ff9b::/96 names the IPv4 proxies it stands
// for, as the addresses are read (::ffff:10.0.0.0/104 is 10.0.0.0/8);
// either /96 itself, which would trust every IPv4 client, is an error
// wrapping pace.ErrInvalidArgument (write 0.0.0.0/0 if you mean it). The
// default is none: the connection's address is the key.
func TrustProxies(prefixes ...netip.Prefix) Option {
	return func(s *settings) {
		if c := s.clientIP("TrustProxies"); c != nil {
			for _, p := range prefixes {
				q, err := trustedPrefix(p)
				if err != nil {
					c.err = err
					return
				}
				c.trusted = append(c.trusted, q)
			}
		}
	}
}

// ProxyHeader names the one forwarding header your trusted proxies write:
// "Forwarded" or "X-Forwarded-For" (in any case). The other is then ignored
// whatever it says. The default reads both, and refuses a request in which
// they name different clients.
func ProxyHeader(name string) Option {
	return func(s *settings) {
		if c := s.clientIP("ProxyHeader"); c != nil {
			switch http.CanonicalHeaderKey(name) {
			case "Forwarded":
				c.headers = useForwarded
			case "X-Forwarded-For":
				c.headers = useXFF
			default:
				c.err = invalidf("ProxyHeader: neither Forwarded nor X-Forwarded-For")
			}
		}
	}
}

// IPv6Bits sets the length of the prefix that groups IPv6 clients under one
// key: 64 by default (one host usually owns a /64, so a finer key lets one
// host be many clients), 128 to key each address on its own. It must be
// between 1 and 128.
func IPv6Bits(bits int) Option {
	return func(s *settings) {
		if c := s.clientIP("IPv6Bits"); c != nil {
			if bits < 1 || bits > 128 {
				c.err = invalidf("IPv6Bits: %d outside [1, 128]", bits)
				return
			}
			c.v6bits = bits
		}
	}
}

// ClientIPWith is ClientIP configured by options (TrustProxies,
// ProxyHeader, IPv6Bits). The error wraps pace.ErrInvalidArgument when an
// option is invalid.
func ClientIPWith(opts ...Option) (KeyFunc, error) {
	c, err := newIPConfig(opts)
	if err != nil {
		return nil, err
	}
	return c.key, nil
}

const (
	useBoth = iota
	useForwarded
	useXFF
)

// maxForwardedLen bounds the forwarding headers ClientIP reads, all field
// lines of one header together: a real chain of proxies writes a few
// hundred bytes.
const maxForwardedLen = 16 << 10

type ipConfig struct {
	trusted []netip.Prefix
	headers int
	v6bits  int
	err     error
}

func newIPConfig(opts []Option) (*ipConfig, error) {
	c := &ipConfig{v6bits: 64}
	if err := (&settings{ip: c}).apply(opts); err != nil {
		return nil, err
	}
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

func (c *ipConfig) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// key is the KeyFunc.
func (c *ipConfig) key(r *http.Request) (string, error) {
	peer, hostPort, ok := parseRemote(r.RemoteAddr)
	if !ok {
		return "", errRemoteNotIP
	}
	if len(c.trusted) == 0 || !c.isTrusted(peer) {
		raw := ""
		if hostPort {
			raw = r.RemoteAddr
		}
		return c.format(peer, raw), nil
	}
	client, err := c.fromHeaders(r.Header, peer)
	if err != nil {
		return "", err
	}
	return c.format(client, ""), nil
}

// fromHeaders returns the client named by the forwarding headers of a
// request that came from the trusted peer.
func (c *ipConfig) fromHeaders(h http.Header, peer netip.Addr) (netip.Addr, error) {
	var fwd, xff netip.Addr
	var hasFwd, hasXFF bool
	var err error
	if c.headers != useXFF {
		if lines := h["Forwarded"]; len(lines) > 0 {
			hasFwd = true
			if fwd, err = walkForwarded(lines, c.isTrusted); err != nil {
				return netip.Addr{}, err
			}
		}
	}
	if c.headers != useForwarded {
		if lines := h["X-Forwarded-For"]; len(lines) > 0 {
			hasXFF = true
			if xff, err = walkXFF(lines, c.isTrusted); err != nil {
				return netip.Addr{}, err
			}
		}
	}
	switch {
	case hasFwd && hasXFF:
		if fwd != xff {
			return netip.Addr{}, errFwdConflict
		}
		return fwd, nil
	case hasFwd:
		return fwd, nil
	case hasXFF:
		return xff, nil
	}
	return peer, nil
}

// format returns the key of client a: the address, or for IPv6 its group.
// raw is the connection's "host:port" string when a came from it, parsed
// as host and port (never a bare host, whose last colon may be inside an
// IPv4-mapped IPv6 address): an IPv4 peer's key is then a substring of it,
// which costs no allocation.
func (c *ipConfig) format(a netip.Addr, raw string) string {
	if a.Is4() {
		if i := strings.LastIndexByte(raw, ':'); i > 0 && raw[0] != '[' {
			return raw[:i] // netip accepted it as IPv4, so it is canonical dotted decimal
		}
		return a.String()
	}
	if c.v6bits == 128 {
		return a.String()
	}
	return netip.PrefixFrom(a, c.v6bits).Masked().String()
}

// parseRemote parses a connection address ("host:port", or a bare host),
// dropping the zone and unmapping IPv4-mapped IPv6; hostPort reports
// whether s was "host:port".
func parseRemote(s string) (a netip.Addr, hostPort, ok bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normal(ap.Addr()), true, true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return normal(a), false, true
	}
	return netip.Addr{}, false, false
}

// normal drops a's zone and reads an IPv4-mapped IPv6 address
// (::ffff:0:0/96) and an IPv4 address translated by NAT64 under the
// well-known prefix 64:ff9b::/96 (RFC 6052, section 2.1) as the IPv4
// address it stands for, so that ::ffff:192.0.2.1, 64:ff9b::192.0.2.1 and
// 192.0.2.1 are one client (and IPv4 clients are not grouped together by
// an IPv6 prefix). Network-specific NAT64 prefixes cannot be told from
// IPv6 addresses, and are keyed as IPv6.
func normal(a netip.Addr) netip.Addr {
	if v4, ok := embeddedV4(a); ok {
		return v4
	}
	return a.WithZone("")
}

// embeddedV4 returns the IPv4 address that a, an address of ::ffff:0:0/96
// or 64:ff9b::/96, stands for (see normal).
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	if a.Is4In6() {
		return a.Unmap(), true
	}
	if a.Is6() {
		if b := a.As16(); [12]byte(b[:12]) == nat64WellKnown {
			return netip.AddrFrom4([4]byte(b[12:])), true
		}
	}
	return netip.Addr{}, false
}

// trustedPrefix returns p masked and read as normal reads the addresses it
// is matched against: a prefix of 96 bits or more inside ::ffff:0:0/96 or
// 64:ff9b::/96 becomes the IPv4 prefix it stands for. Either /96 itself
// would become 0.0.0.0/0, every IPv4 client: an error, as is an invalid p.
// A shorter prefix (::/0, 64:ff9b::/64) stays IPv6, matched by IPv6 peers.
func trustedPrefix(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, invalidf("ClientIP: invalid trusted prefix")
	}
	p = p.Masked()
	v4, ok := embeddedV4(p.Addr())
	switch {
	case !ok || p.Bits() < 96:
		return p, nil
	case p.Bits() == 96:
		return netip.Prefix{}, invalidf("ClientIP: a trusted prefix of all IPv4-mapped or NAT64 addresses trusts every IPv4 client")
	}
	return netip.PrefixFrom(v4, p.Bits()-96), nil
}

// nat64WellKnown is the first 96 bits of the NAT64 well-known prefix,
// 64:ff9b::/96.
var nat64WellKnown = [12]byte{0, 0x64, 0xff, 0x9b}

// validToken reports whether s is a non-empty HTTP token (a valid field
// name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
