package httplimit_test

import (
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
)

const realClient = "203.0.113.7"

var proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}

// req builds a request from remote with the given header lines, each
// "Name: value".
func req(remote string, lines ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for _, l := range lines {
		name, value, _ := strings.Cut(l, ": ")
		r.Header.Add(name, value)
	}
	return r
}

// status returns the status of the default answer to err ("" and 0 for
// nil).
func status(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ke *httplimit.KeyError
	if !errors.As(err, &ke) {
		t.Fatalf("error %v is not a *KeyError", err)
	}
	if !strings.HasPrefix(err.Error(), "httplimit: ") {
		t.Errorf("error %q does not start with the package name", err)
	}
	return ke.Status
}

// TestClientIPSpoofing is the spoofing matrix: a client behind no proxy,
// behind one or two trusted proxies, writing forged X-Forwarded-For and
// Forwarded headers of every kind; the key is always the real client, or the
// request is refused. It is never an address the client chose.
func TestClientIPSpoofing(t *testing.T) {
	direct := httplimit.ClientIP()
	behind := httplimit.ClientIP(proxies...)
	onlyFwd, err := httplimit.ClientIPWith(httplimit.TrustProxies(proxies...), httplimit.ProxyHeader("forwarded"))
	if err != nil {
		t.Fatal(err)
	}
	onlyXFF, err := httplimit.ClientIPWith(httplimit.TrustProxies(proxies...), httplimit.ProxyHeader("X-Forwarded-For"))
	if err != nil {
		t.Fatal(err)
	}
	full6, err := httplimit.ClientIPWith(httplimit.IPv6Bits(128))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("1.1.1.1, ", 1<<20/9)
	many := strings.Repeat("for=10.0.0.9, ", 17)
	for _, c := range []struct {
		name   string
		key    httplimit.KeyFunc
		r      *http.Request
		want   string
		status int
	}{
		// No proxy: the connection, whatever the headers say.
		{"direct", direct, req(realClient + ":5555"), realClient, 0},
		{"direct forged XFF", direct, req(realClient+":5555", "X-Forwarded-For: 1.1.1.1"), realClient, 0},
		{"direct forged Forwarded", direct, req(realClient+":5555", "Forwarded: for=1.1.1.1"), realClient, 0},
		{"direct forged both", direct, req(realClient+":5555", "Forwarded: for=1.1.1.1", "X-Forwarded-For: 2.2.2.2"), realClient, 0},
		{"direct 1 MB XFF ignored", direct, req(realClient+":5555", "X-Forwarded-For: "+long), realClient, 0},
		{"direct malformed Forwarded ignored", direct, req(realClient+":5555", `Forwarded: for="`), realClient, 0},
		// Proxies configured, but the request came straight from the client.
		{"untrusted peer forged XFF", behind, req(realClient+":5555", "X-Forwarded-For: 10.0.0.1"), realClient, 0},
		{"untrusted peer forged Forwarded", behind, req(realClient+":5555", "Forwarded: for=1.1.1.1"), realClient, 0},
		// One trusted proxy that appends.
		{"one proxy XFF", behind, req("10.0.0.1:80", "X-Forwarded-For: "+realClient), realClient, 0},
		{"one proxy forged XFF", behind, req("10.0.0.1:80", "X-Forwarded-For: 1.1.1.1, "+realClient), realClient, 0},
		{"one proxy forged trusted XFF", behind, req("10.0.0.1:80", "X-Forwarded-For: 10.9.9.9,"+realClient), realClient, 0},
		{"one proxy forged XFF line", behind, req("10.0.0.1:80", "X-Forwarded-For: 1.1.1.1", "X-Forwarded-For: "+realClient), realClient, 0},
		{"one proxy XFF with port", behind, req("10.0.0.1:80", "X-Forwarded-For: "+realClient+":4711"), realClient, 0},
		{"one proxy XFF empty elements", behind, req("10.0.0.1:80", "X-Forwarded-For: 1.1.1.1, , "+realClient+" ,"), realClient, 0},
		{"one proxy Forwarded", behind, req("10.0.0.1:80", "Forwarded: for="+realClient), realClient, 0},
		{"one proxy forged Forwarded", behind, req("10.0.0.1:80", "Forwarded: for=1.1.1.1;proto=http, for="+realClient), realClient, 0},
		{"one proxy forged obfuscated", behind, req("10.0.0.1:80", "Forwarded: for=_evil, for=unknown,for="+realClient), realClient, 0},
		{"one proxy Forwarded quoted port", behind, req("10.0.0.1:80", `Forwarded: for="`+realClient+`:1234"`), realClient, 0},
		{"one proxy Forwarded obfuscated port", behind, req("10.0.0.1:80", `Forwarded: for="`+realClient+`:_p1"`), realClient, 0},
		{"one proxy Forwarded case and OWS", behind, req("10.0.0.1:80", "Forwarded: for=1.1.1.1 ,  For="+realClient+" ; proto=https"), realClient, 0},
		{"one proxy Forwarded dangling pair", behind, req("10.0.0.1:80", "Forwarded: for=1.1.1.1;, for="+realClient), realClient, 0},
		{"one proxy both agree", behind, req("10.0.0.1:80", "Forwarded: for="+realClient, "X-Forwarded-For: "+realClient), realClient, 0},
		// Two trusted proxies.
		{"two proxies XFF", behind, req("10.0.0.2:80", "X-Forwarded-For: 1.1.1.1, "+realClient+", 10.0.0.1"), realClient, 0},
		{"two proxies XFF lines", behind, req("10.0.0.2:80", "X-Forwarded-For: 1.1.1.1", "X-Forwarded-For: "+realClient, "X-Forwarded-For: 10.0.0.1"), realClient, 0},
		{"two proxies Forwarded v6", behind, req("10.0.0.2:80", `Forwarded: for=1.1.1.1, for="[2001:db8:1:2::99]:4711", for=10.0.0.1`), "2001:db8:1:2::/64", 0},
		{"two proxies v6 hops", behind, req("[2001:db8:ffff::2]:80", `Forwarded: for=`+realClient+`, for="[2001:db8:ffff::1]"`), realClient, 0},
		{"two proxies all trusted", behind, req("10.0.0.2:80", "X-Forwarded-For: 10.0.0.5, 10.0.0.1"), "10.0.0.5", 0},
		{"trusted peer without header", behind, req("10.0.0.1:80"), "10.0.0.1", 0},
		// The deciding entry is not an address.
		{"deciding unknown", behind, req("10.0.0.1:80", "Forwarded: for=unknown"), "", 400},
		{"deciding obfuscated", behind, req("10.0.0.1:80", "Forwarded: for=_hidden"), "", 400},
		{"deciding XFF unknown", behind, req("10.0.0.1:80", "X-Forwarded-For: unknown"), "", 400},
		{"deciding XFF host name", behind, req("10.0.0.1:80", "X-Forwarded-For: 1.1.1.1, evil.example"), "", 400},
		{"deciding XFF bad port", behind, req("10.0.0.1:80", "X-Forwarded-For: "+realClient+":123456"), "", 400},
		{"deciding XFF empty", behind, req("10.0.0.1:80", "X-Forwarded-For: , "), "", 400},
		{"deciding Forwarded unbracketed v6", behind, req("10.0.0.1:80", `Forwarded: for="2001:db8::1"`), "", 400},
		{"deciding Forwarded no for", behind, req("10.0.0.1:80", "Forwarded: for=1.1.1.1, proto=https"), "", 400},
		{"deciding Forwarded for twice", behind, req("10.0.0.1:80", "Forwarded: for=1.1.1.1;for="+realClient), "", 400},
		{"deciding Forwarded escaped", behind, req("10.0.0.1:80", `Forwarded: for="\`+realClient+`"`), "", 400},
		{"deciding Forwarded empty", behind, req("10.0.0.1:80", "Forwarded: ,"), "", 400},
		// A forged header that would shift the proxies' elements fails whole.
		{"forged unterminated quote", behind, req("10.0.0.1:80", `Forwarded: for="1.1.1.1, for=`+realClient), "", 400},
		{"forged bad token", behind, req("10.0.0.1:80", "Forwarded: for=1.1.1.1 x, for="+realClient), "", 400},
		{"forged no equals", behind, req("10.0.0.1:80", "Forwarded: for, for="+realClient), "", 400},
		{"forged control byte", behind, req("10.0.0.1:80", "Forwarded: for=\"\x01\", for="+realClient), "", 400},
		// Both headers naming different clients.
		{"both disagree", behind, req("10.0.0.1:80", "Forwarded: for="+realClient, "X-Forwarded-For: 1.1.1.1"), "", 400},
		{"both disagree, Forwarded only", onlyFwd, req("10.0.0.1:80", "Forwarded: for="+realClient, "X-Forwarded-For: 1.1.1.1"), realClient, 0},
		{"both disagree, XFF only", onlyXFF, req("10.0.0.1:80", "Forwarded: for=1.1.1.1", "X-Forwarded-For: "+realClient), realClient, 0},
		{"XFF only ignores malformed Forwarded", onlyXFF, req("10.0.0.1:80", `Forwarded: for="`, "X-Forwarded-For: "+realClient), realClient, 0},
		// Oversized and overlong chains.
		{"1 MB XFF through proxy", behind, req("10.0.0.1:80", "X-Forwarded-For: "+long+realClient), "", 400},
		{"17 trusted hops", behind, req("10.0.0.1:80", "Forwarded: for="+realClient+", "+many+"for=10.0.0.1"), "", 400},
		// Address forms.
		{"v6 grouped by /64", direct, req("[2001:db8:1:2::99]:443"), "2001:db8:1:2::/64", 0},
		{"v6 same /64", direct, req("[2001:db8:1:2:ffff::1]:443"), "2001:db8:1:2::/64", 0},
		{"v6 by address", full6, req("[2001:db8:1:2::99]:443"), "2001:db8:1:2::99", 0},
		{"v4-mapped", direct, req("[::ffff:" + realClient + "]:80"), realClient, 0},
		{"v4-mapped in XFF", behind, req("10.0.0.1:80", "X-Forwarded-For: ::ffff:"+realClient), realClient, 0},
		{"NAT64 well-known prefix", direct, req("[64:ff9b::" + realClient + "]:80"), realClient, 0},
		{"NAT64 well-known prefix, hex", direct, req("[64:ff9b::c000:201]:80"), "192.0.2.1", 0},
		{"NAT64 in XFF", behind, req("10.0.0.1:80", "X-Forwarded-For: 64:ff9b::"+realClient), realClient, 0},
		{"NAT64 in Forwarded", behind, req("10.0.0.1:80", `Forwarded: for="[64:ff9b::`+realClient+`]"`), realClient, 0},
		{"NAT64 local-use prefix is IPv6", direct, req("[64:ff9b:1::c000:201]:80"), "64:ff9b:1::/64", 0},
		{"zone", direct, req("[fe80::1%eth0]:80"), "fe80::/64", 0},
		{"no port", direct, req(realClient), realClient, 0},
		{"not an IP", direct, req("@"), "", 500},
		{"empty remote", direct, req(""), "", 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			key, err := c.key(c.r)
			if got := status(t, err); got != c.status || key != c.want {
				t.Fatalf("key = %q, %v (status %d); want %q, status %d", key, err, got, c.want, c.status)
			}
		})
	}
}

// FuzzForgedForwarding: whatever a client writes into its forwarding
// headers, once its trusted proxy has appended the client's real address,
// the key is that address or the request is refused.
func FuzzForgedForwarding(f *testing.F) {
	for _, seed := range []struct{ xff, fwd string }{
		{"", ""},
		{"1.1.1.1", "for=1.1.1.1"},
		{"10.0.0.1", `for="[2001:db8:ffff::1]"`}, // a trusted address, to be skipped
		{"", `for="1.1.1.1`},                     // unterminated: swallows what the proxy appends
		{"", `for="\`},                           // a dangling escape
		{"", "for=1.1.1.1;"},                     // a dangling pair separator
		{"", "for=1.1.1.1,"},                     // a dangling list separator
		{"1.1.1.1,", "for"},                      // a pair without a value
		{"[::1]:80", `for="[::1]:80";by=_x`},
		{"unknown", "for=unknown"},
		{"\t", " "},
	} {
		f.Add(seed.xff, seed.fwd)
	}
	both := httplimit.ClientIP(proxies...)
	onlyFwd, _ := httplimit.ClientIPWith(httplimit.TrustProxies(proxies...), httplimit.ProxyHeader("Forwarded"))
	onlyXFF, _ := httplimit.ClientIPWith(httplimit.TrustProxies(proxies...), httplimit.ProxyHeader("X-Forwarded-For"))
	f.Fuzz(func(t *testing.T, xff, fwd string) {
		if strings.ContainsAny(xff+fwd, "\r\n") {
			return // not a header value
		}
		r := req("10.0.0.1:80")
		// The proxy appends the client it sees to what the client sent.
		appendTo := func(name, forged, own string) {
			if forged == "" {
				r.Header.Set(name, own)
			} else {
				r.Header.Set(name, forged+", "+own)
			}
		}
		appendTo("X-Forwarded-For", xff, realClient)
		appendTo("Forwarded", fwd, "for="+realClient)
		for _, kf := range []httplimit.KeyFunc{both, onlyFwd, onlyXFF} {
			key, err := kf(r)
			if err == nil && key != realClient {
				t.Fatalf("XFF %q, Forwarded %q: key %q, want %q or an error", r.Header.Get("X-Forwarded-For"), r.Header.Get("Forwarded"), key, realClient)
			}
			if err != nil && status(t, err) != http.StatusBadRequest {
				t.Fatalf("error %v: want a 400", err)
			}
		}
		// Through a proxy that writes only Forwarded, a forged XFF passes
		// untouched: the proxy-only mode still finds the client.
		r.Header.Set("X-Forwarded-For", xff)
		if key, err := onlyFwd(r); err == nil && key != realClient {
			t.Fatalf("Forwarded-only with forged XFF %q: key %q", xff, key)
		}
	})
}

func TestClientIPConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  httplimit.Option
	}{
		{"zero prefix", httplimit.TrustProxies(netip.Prefix{})},
		{"bad header", httplimit.ProxyHeader("X-Real-IP")},
		{"v6 bits 0", httplimit.IPv6Bits(0)},
		{"v6 bits 129", httplimit.IPv6Bits(129)},
		// Read as IPv4 (as the peers are), either /96 is 0.0.0.0/0.
		{"all IPv4-mapped", httplimit.TrustProxies(netip.MustParsePrefix("::ffff:0:0/96"))},
		{"all NAT64", httplimit.TrustProxies(netip.MustParsePrefix("64:ff9b::/96"))},
		{"all NAT64, host bits set", httplimit.TrustProxies(netip.MustParsePrefix("64:ff9b::10.0.0.1/96"))},
	} {
		if _, err := httplimit.ClientIPWith(c.opt); !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("%s: err = %v; want ErrInvalidArgument", c.name, err)
		}
	}
	// ClientIP cannot return the error: every call does, as a server fault.
	for _, p := range []netip.Prefix{{}, netip.MustParsePrefix("::ffff:0:0/96"), netip.MustParsePrefix("64:ff9b::/96")} {
		key, err := httplimit.ClientIP(p)(req(realClient + ":1"))
		if key != "" || !errors.Is(err, pace.ErrInvalidArgument) || status(t, err) != 500 {
			t.Fatalf("ClientIP(%v) = %q, %v; want an invalid-argument 500", p, key, err)
		}
	}
}

// TestTrustedPrefixShorterThanMapped: a trusted prefix shorter than 96
// bits stays IPv6 (TrustProxies): it trusts IPv6 peers, never an IPv4
// peer (however the connection writes it), so ::/0 or 64:ff9b::/64 cannot
// trust every IPv4 client.
func TestTrustedPrefixShorterThanMapped(t *testing.T) {
	for _, c := range []struct{ trusted, peer, want string }{
		{"::/0", "[::ffff:192.0.2.1]:443", "192.0.2.1"},
		{"64:ff9b::/64", "[64:ff9b::c000:201]:443", "192.0.2.1"},
		{"64:ff9b::/64", "[64:ff9b::1:0:0:1]:443", "198.51.100.7"}, // an IPv6 proxy of that prefix
		{"::/0", "[2001:db8::1]:443", "198.51.100.7"},
	} {
		r := req(c.peer)
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		if key, err := httplimit.ClientIP(netip.MustParsePrefix(c.trusted))(r); key != c.want || err != nil {
			t.Errorf("trusted %s, peer %s: key %q, %v; want %q", c.trusted, c.peer, key, err, c.want)
		}
	}
}

func TestHeader(t *testing.T) {
	kf := httplimit.Header("x-api-key")
	for _, c := range []struct {
		name   string
		r      *http.Request
		want   string
		status int
	}{
		{"present", req("1.2.3.4:1", "X-Api-Key: k-123"), "k-123", 0},
		{"absent", req("1.2.3.4:1"), "", 400},
		{"empty", req("1.2.3.4:1", "X-Api-Key: "), "", 400},
		{"twice", req("1.2.3.4:1", "X-Api-Key: a", "X-Api-Key: b"), "", 400},
		{"1 MB", req("1.2.3.4:1", "X-Api-Key: "+strings.Repeat("k", 1<<20)), "", 400},
		{"at the bound", req("1.2.3.4:1", "X-Api-Key: "+strings.Repeat("k", httplimit.MaxKeyLen)), strings.Repeat("k", httplimit.MaxKeyLen), 0},
	} {
		key, err := kf(c.r)
		if got := status(t, err); key != c.want || got != c.status {
			t.Errorf("%s: key = %.20q, %v; want %.20q, status %d", c.name, key, err, c.want, c.status)
		}
	}
	for _, name := range []string{"", "bad name", "x:y"} {
		if _, err := httplimit.Header(name)(req("1.2.3.4:1")); !errors.Is(err, pace.ErrInvalidArgument) {
			t.Errorf("Header(%q): err = %v; want ErrInvalidArgument", name, err)
		}
	}
}

// post builds a token request with a urlencoded body.
func post(body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/token", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestClientID(t *testing.T) {
	kf := httplimit.ClientID()
	chunked := post("client_id=" + strings.Repeat("a", httplimit.DefaultMaxFormBody))
	chunked.ContentLength = -1
	withBasic := func(auth string, r *http.Request) *http.Request { r.Header.Set("Authorization", auth); return r }
	for _, c := range []struct {
		name   string
		r      *http.Request
		want   string
		status int
	}{
		{"form", post("grant_type=client_credentials&client_id=app-1&client_secret=s"), "app-1", 0},
		{"form encoded", post("client_id=my%20app%2B1"), "my app+1", 0},
		{"form with charset", withBasic("", func() *http.Request {
			r := post("client_id=app-2")
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
			return r
		}()), "app-2", 0},
		{"basic", withBasic(basic("app-1", "s"), post("")), "app-1", 0},
		{"basic url-decoded", withBasic(basic("my+app%3A1", "s"), post("")), "my app:1", 0},
		{"basic and form name two clients", withBasic(basic("app-1", "s"), post("client_id=other")), "", 400},
		{"basic and form agree", withBasic(basic("app-1", "s"), post("client_id=app-1")), "app-1", 0},
		{"bearer falls back to form", withBasic("Bearer t", post("client_id=app-3")), "app-3", 0},
		{"basic malformed base64", withBasic("Basic !!!", post("client_id=x")), "", 400},
		{"basic bad escape", withBasic(basic("app%zz", "s"), post("")), "", 400},
		{"basic empty user", withBasic(basic("", "s"), post("client_id=x")), "", 400},
		{"no id", post("grant_type=client_credentials"), "", 400},
		{"empty id", post("client_id="), "", 400},
		{"two ids", post("client_id=a&client_id=b"), "", 400},
		{"bad form", post("client_id=%zz"), "", 400},
		{"not a form", func() *http.Request {
			r := post("client_id=x")
			r.Header.Set("Content-Type", "application/json")
			return r
		}(), "", 400},
		{"GET with the id in the query", httptest.NewRequest(http.MethodGet, "/token?client_id=x", nil), "x", 0},
		{"GET without an id", httptest.NewRequest(http.MethodGet, "/token?grant_type=x", nil), "", 400},
		{"long id", post("client_id=" + strings.Repeat("a", httplimit.MaxKeyLen+1)), "", 400},
		{"body over bound", post("client_id=x&pad=" + strings.Repeat("a", httplimit.DefaultMaxFormBody)), "", 413},
		{"chunked body over bound", chunked, "", 413},
	} {
		key, err := kf(c.r)
		if got := status(t, err); key != c.want || got != c.status {
			t.Errorf("%s: key = %.20q, %v; want %.20q, status %d", c.name, key, err, c.want, c.status)
		}
	}
	if _, err := httplimit.ClientIDMaxBody(0); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Errorf("ClientIDMaxBody(0): err = %v; want ErrInvalidArgument", err)
	}
	small, err := httplimit.ClientIDMaxBody(16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small(post("client_id=abcdefghij")); status(t, err) != 413 {
		t.Errorf("ClientIDMaxBody(16) on 20 bytes: err = %v; want 413", err)
	}
	if key, err := small(post("client_id=abc")); key != "abc" || err != nil {
		t.Errorf("ClientIDMaxBody(16) on 13 bytes = %q, %v", key, err)
	}
}

// TestClientIDBodyIntact: the handler reads the body, and parses the form,
// as if ClientID had not read it, also when it was refused for its size.
func TestClientIDBodyIntact(t *testing.T) {
	body := "grant_type=client_credentials&client_id=app-1&client_secret=s%20x"
	r := post(body)
	if key, err := httplimit.ClientID()(r); key != "app-1" || err != nil {
		t.Fatalf("ClientID = %q, %v", key, err)
	}
	if err := r.ParseForm(); err != nil {
		t.Fatal(err)
	}
	if got := r.PostForm.Get("client_secret"); got != "s x" {
		t.Fatalf("handler's client_secret = %q after ClientID", got)
	}
	// A second key function (two limits keyed by ClientID) reads the parsed form.
	if key, err := httplimit.ClientID()(r); key != "app-1" || err != nil {
		t.Fatalf("ClientID after ParseForm = %q, %v", key, err)
	}

	r = post(body)
	if _, err := httplimit.ClientID()(r); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r.Body)
	if err != nil || string(got) != body {
		t.Fatalf("handler's body = %q, %v; want %q", got, err, body)
	}

	big := "client_id=x&pad=" + strings.Repeat("b", 100)
	r = post(big)
	r.ContentLength = -1
	small, _ := httplimit.ClientIDMaxBody(20)
	if _, err := small(r); status(t, err) != 413 {
		t.Fatalf("err = %v; want 413", err)
	}
	if got, _ := io.ReadAll(r.Body); string(got) != big {
		t.Fatalf("body after a refusal = %q; want it whole", got)
	}
	if vals, _ := url.ParseQuery(big); vals.Get("client_id") != "x" {
		t.Fatal("test body is not what it seems")
	}
}
