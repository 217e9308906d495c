package sfv_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/ratepace/pace/internal/sfv"
)

// TestParseList checks the parser on the RFC's and the RateLimit fields'
// examples, and on its limits.
func TestParseList(t *testing.T) {
	items, err := sfv.ParseList(`"burst";q=100;w=60,"daily";q=1000;w=86400, "x";r=0;pk=:cHsdsRa894==:;flag;r=2`)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || items[0].Kind != sfv.String || items[0].Text != "burst" || items[2].Text != "x" {
		t.Fatalf("parsed %+v", items)
	}
	if w, ok := items[1].IntParam("w"); !ok || w != 86400 {
		t.Fatalf("w = %d, %v; want 86400", w, ok)
	}
	if v, ok := items[2].Param("flag"); !ok || v.Kind != sfv.Boolean || v.Text != "?1" {
		t.Fatalf("bare parameter = %+v, %v; want the Boolean true", v, ok)
	}
	if v, _ := items[2].Param("pk"); v.Kind != sfv.ByteSequence || v.Text != "cHsdsRa894==" {
		t.Fatalf("pk = %+v; want the Byte Sequence cHsdsRa894==", v)
	}
	if r, _ := items[2].IntParam("r"); r != 2 || len(items[2].Params) != 3 || items[2].Params[0].Key != "r" {
		t.Fatalf("params %+v; want r=2 (the last value) first, of 3", items[2].Params)
	}
	for _, tc := range []struct {
		in   string
		kind sfv.Kind
	}{{"-12", sfv.Integer}, {"1.25", sfv.Decimal}, {"tok:/x", sfv.Token}, {"*t", sfv.Token}, {"?0", sfv.Boolean}, {`"a\"b"`, sfv.String}} {
		if items, err := sfv.ParseList(tc.in); err != nil || len(items) != 1 || items[0].Kind != tc.kind {
			t.Errorf("%q parsed as %+v, %v; want one item of kind %d", tc.in, items, err, tc.kind)
		}
	}

	bad := []string{``, ` `, `"a",`, `"a";Q=1`, `"unterminated`, `"a";q=1 x`, `"a";q=12345678901234567`, `"\n"`,
		`(a b)`, `-.5`, `1.`, `1.2345`, `1234567890123.5`, `:ab`, `:a b:`, `?2`, `a;`}
	bad = append(bad, strings.Repeat("a,", sfv.MaxMembers)+"a")
	params := "a"
	for j := range sfv.MaxParams + 1 {
		params += ";k" + strconv.Itoa(j)
	}
	bad = append(bad, params)
	for _, in := range bad {
		if _, err := sfv.ParseList(in); !errors.Is(err, sfv.ErrSyntax) {
			t.Errorf("%.40q: err = %v; want ErrSyntax", in, err)
		}
	}
	good := []string{strings.Repeat("a,", sfv.MaxMembers-1) + "a", params[:strings.LastIndexByte(params, ';')], params[:strings.LastIndexByte(params, ';')] + ";k0=5"}
	for _, in := range good {
		if _, err := sfv.ParseList(in); err != nil {
			t.Errorf("%.40q: %v; want no error", in, err)
		}
	}
}
