package httplimit_test

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"testing"

	"github.com/ratepace/pace/httplimit"
)

// multipartBody returns a multipart/form-data body of the given parts
// (name, value; a name "file:NAME" makes a file part) and its Content-Type.
func multipartBody(t *testing.T, parts ...string) (string, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i < len(parts); i += 2 {
		name, value := parts[i], parts[i+1]
		var err error
		var w interface{ Write([]byte) (int, error) }
		switch {
		case strings.HasPrefix(name, "file:"):
			w, err = mw.CreateFormFile(strings.TrimPrefix(name, "file:"), "id.txt")
		case strings.HasPrefix(name, "qp:"): // quoted-printable, which ReadForm decodes
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", `form-data; name="`+strings.TrimPrefix(name, "qp:")+`"`)
			h.Set("Content-Transfer-Encoding", "quoted-printable")
			w, err = mw.CreatePart(h)
		default:
			w, err = mw.CreateFormField(name)
		}
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(value))
	}
	mw.Close()
	return b.String(), mw.FormDataContentType()
}

// TestClientIDAgreesWithEveryFormReader: whatever the encoding, a client id
// net/http hands the handler (r.FormValue, r.PostFormValue,
// r.MultipartForm, the Basic user name) is the key ClientID returns, or
// ClientID refuses the request with a 400. Each case is a forger naming the
// victim in one place and itself in another, which a handler reading the
// other place authenticates as the forger while the victim's pace pays, or
// one honest encoding keyed as the handler reads it.
func TestClientIDAgreesWithEveryFormReader(t *testing.T) {
	type req struct {
		name, method, target, body, ctype, basic string
		want                                     string // the key; "" for a 400
	}
	mp := func(parts ...string) (string, string) { return multipartBody(t, parts...) }
	var cases []req
	add := func(name, method, target, basic, want string, body, ctype string) {
		cases = append(cases, req{name, method, target, body, ctype, basic, want})
	}
	b, ct := mp("client_id", "forger", "client_secret", "forgers-own")
	add("Basic victim, multipart forger", http.MethodPost, "/token", "victim", "", b, ct)
	add("Basic victim, multipart forger, GET", http.MethodGet, "/token", "victim", "", b, ct)
	add("Basic victim, multipart forger, DELETE", http.MethodDelete, "/token", "victim", "", b, ct)
	add("query victim, multipart forger", http.MethodPost, "/token?client_id=victim", "", "", b, ct)
	add("multipart alone", http.MethodPost, "/token", "", "forger", b, ct)
	add("Basic and multipart agree", http.MethodPost, "/token", "forger", "forger", b, ct)
	b2, ct2 := mp("qp:client_id", "forg=65r")
	add("Basic victim, multipart quoted-printable forger", http.MethodPost, "/token", "victim", "", b2, ct2)
	b3, ct3 := mp("client_id", "forger", "client_id", "victim")
	add("multipart two ids", http.MethodPost, "/token", "", "", b3, ct3)
	b4, ct4 := mp("file:client_id", "forger", "client_secret", "s")
	add("multipart file named client_id is no id", http.MethodPost, "/token", "victim", "victim", b4, ct4)
	form := "application/x-www-form-urlencoded"
	add("Basic victim, query forger, POST", http.MethodPost, "/token?client_id=forger", "victim", "", "client_secret=s", form)
	add("Basic victim, query forger, GET", http.MethodGet, "/token?client_id=forger&client_secret=s", "victim", "", "", "")
	add("Basic victim, escaped query name", http.MethodGet, "/token?client%5Fid=forger", "victim", "", "", "")
	add("query forger, body victim", http.MethodPost, "/token?client_id=forger", "", "", "client_id=victim", form)
	add("query victim, body forger", http.MethodPost, "/token?client_id=victim", "", "", "client_id=forger", form)
	add("query and body agree", http.MethodPost, "/token?client_id=app", "", "app", "client_id=app", form)
	add("query alone", http.MethodGet, "/authorize?client_id=app", "", "app", "", "")
	add("query two ids", http.MethodGet, "/authorize?client_id=a&client_id=b", "", "", "", "")
	add("multipart without boundary", http.MethodPost, "/token", "", "", "x", "multipart/form-data")
	add("multipart truncated", http.MethodPost, "/token", "victim", "", b[:len(b)/2], ct)
	// A malformed parameter: mime.ParseMediaType returns the media type
	// with ErrInvalidMediaParameter; net/http's ParseForm reads an
	// urlencoded body anyway, its ParseMultipartForm reads no multipart one.
	add("Basic victim, body forger, malformed charset", http.MethodPost, "/token", "victim", "", "client_id=forger", form+"; charset")
	add("body alone, malformed charset", http.MethodPost, "/token", "", "app", "client_id=app", form+`; charset="utf-8`)
	add("Basic victim, multipart forger, malformed parameter", http.MethodPost, "/token", "victim", "victim", b, ct+"; charset")

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			newReq := func() *http.Request {
				r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
				if c.ctype != "" {
					r.Header.Set("Content-Type", c.ctype)
				}
				if c.basic != "" {
					r.SetBasicAuth(c.basic, "x")
				}
				return r
			}
			r := newReq()
			key, err := httplimit.ClientID()(r)
			if c.want == "" {
				if got := status(t, err); got != http.StatusBadRequest {
					t.Fatalf("key %q, %v; want a 400", key, err)
				}
			} else if key != c.want || err != nil {
				t.Fatalf("key %q, %v; want %q", key, err, c.want)
			}
			if err != nil {
				return
			}
			// What the handler reads, from the body ClientID put back.
			var seen []string
			if v := r.FormValue("client_id"); v != "" {
				seen = append(seen, v)
			}
			if v := r.PostFormValue("client_id"); v != "" {
				seen = append(seen, v)
			}
			if r.MultipartForm != nil {
				seen = append(seen, r.MultipartForm.Value["client_id"]...)
			}
			if u, _, ok := r.BasicAuth(); ok {
				seen = append(seen, u)
			}
			for _, v := range seen {
				if v != key {
					t.Fatalf("keyed as %q, but the handler reads client_id %q", key, v)
				}
			}
		})
	}
}

// TestMultipartForgerSpendsNothing: through the middleware, a forger with
// credentials of its own, naming the victim in Basic and itself in a
// multipart body that the handler authenticates, is answered 400 and spends
// nothing of the victim's pace.
func TestMultipartForgerSpendsNothing(t *testing.T) {
	clk := newClock()
	p := newPace(t, 1, clk)
	m := mustNew(t, []httplimit.Limit{httplimit.Pace(p, httplimit.ClientID(), httplimit.Name("per-client"), httplimit.ReturnOn(http.StatusUnauthorized))})
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("client_id") != "forger" || r.FormValue("client_secret") != "forgers-own" {
			http.Error(w, "invalid_client", http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`{"access_token":"t"}`))
	}))
	body, ct := multipartBody(t, "client_id", "forger", "client_secret", "forgers-own")
	r := httptest.NewRequest(http.MethodPost, "/token", strings.NewReader(body))
	r.Header.Set("Content-Type", ct)
	r.SetBasicAuth("victim", "x")
	if w := serve(h, r); w.Code != http.StatusBadRequest {
		t.Fatalf("forger: %d; want 400", w.Code)
	}
	if ok, _ := p.Peek("victim"); !ok {
		t.Fatal("the victim's pace was spent by a forger naming it in Basic")
	}
}
