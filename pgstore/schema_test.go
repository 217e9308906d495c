package pgstore

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ratepace/pace"
)

// misplaced returns the offsets of the occurrences of ph in src that stand
// outside code: in a comment, a string literal or a quoted identifier, where
// a spliced name could end the comment or the literal and become SQL.
// Dollar-quoted strings are function bodies here, so their contents are
// lexed as code in turn. The second result reports a construct left open.
func misplaced(src, ph string) (offsets []int, open string) {
	within := func(lo, hi int) {
		for j := lo; j < hi; {
			k := strings.Index(src[j:hi], ph)
			if k < 0 {
				return
			}
			offsets = append(offsets, j+k)
			j += k + len(ph)
		}
	}
	var lex func(lo, hi int)
	lex = func(lo, hi int) {
		for i := lo; i < hi; {
			rest := src[i:hi]
			switch {
			case strings.HasPrefix(rest, ph):
				i += len(ph)
			case strings.HasPrefix(rest, "--"):
				end := strings.IndexByte(rest, '\n')
				if end < 0 {
					end = len(rest)
				}
				within(i, i+end)
				i += end
			case strings.HasPrefix(rest, "/*"):
				j, depth := i, 0
				for j < hi {
					switch {
					case strings.HasPrefix(src[j:hi], "/*"):
						depth++
						j += 2
					case strings.HasPrefix(src[j:hi], "*/"):
						depth--
						j += 2
					default:
						j++
					}
					if depth == 0 {
						break
					}
				}
				if depth != 0 {
					open = "a block comment"
				}
				within(i, j)
				i = j
			case rest[0] == '\'' || rest[0] == '"':
				q, j := rest[0], i+1
				for ; j < hi; j++ {
					if src[j] == q {
						if j+1 < hi && src[j+1] == q {
							j++
							continue
						}
						break
					}
				}
				if j >= hi {
					open = "a quoted string or identifier"
				}
				within(i, min(j+1, hi))
				i = j + 1
			case rest[0] == '$':
				tag := dollarTagAt(rest)
				if tag == "" {
					i++
					continue
				}
				body := i + len(tag)
				end := strings.Index(src[body:hi], tag)
				if end < 0 {
					open = "a dollar-quoted body"
					return
				}
				lex(body, body+end)
				i = body + end + len(tag)
			default:
				i++
			}
		}
	}
	lex(0, len(src))
	return offsets, open
}

// dollarTagAt returns the dollar-quote delimiter at the start of s ("$$" or
// "$tag$"), or "" if there is none.
func dollarTagAt(s string) string {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1]
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || j > 1 && '0' <= c && c <= '9' || c >= 0x80:
		default:
			return ""
		}
	}
	return ""
}

// TestSchemaPlaceholdersStandInCode checks half of what keeps a schema name
// from changing the SQL New runs: every placeholder of schema.sql and
// sweep.sql stands in code, never in a comment (a name with a newline would
// end it) or a string literal, every placeholder is replaced, and the only
// dollar signs are the empty delimiters that install replaces by a tag
// absent from the name.
func TestSchemaPlaceholdersStandInCode(t *testing.T) {
	for _, f := range []struct {
		name, src string
		phs       []string
	}{
		{"schema.sql", schemaSQL, []string{"@schema@", "@unlogged@", "@version@", "@refill_window@"}},
		{"sweep.sql", sweepSQL, []string{"@schema@", "@table@", "@reclaim_at@"}},
	} {
		for _, ph := range f.phs {
			if !strings.Contains(f.src, ph) {
				t.Errorf("%s has no %s", f.name, ph)
			}
			bad, open := misplaced(f.src, ph)
			if open != "" {
				t.Fatalf("%s leaves %s open", f.name, open)
			}
			for _, off := range bad {
				line := strings.Count(f.src[:off], "\n") + 1
				t.Errorf("%s:%d: %s stands in a comment, string or quoted identifier", f.name, line, ph)
			}
		}
		if n, m := strings.Count(f.src, "$"), strings.Count(f.src, "$$"); n != 2*m {
			t.Errorf("%s has %d dollar signs besides its %d empty delimiters; install replaces only \"$$\"", f.name, n-2*m, m)
		}
	}
	for _, unlogged := range []bool{false, true} {
		if src := ddl(`"x"`, unlogged); strings.Contains(src, "@") || strings.Contains(src, "$$") {
			t.Errorf("ddl(unlogged %v) leaves a placeholder or an empty delimiter in place", unlogged)
		}
	}
	// The lexer itself: a placeholder in each kind of non-code is found.
	for _, src := range []string{"-- @schema@\n", "/* /* */ @schema@ */", "'@schema@'", `"@schema@"`, "$$ -- @schema@\n $$"} {
		if bad, _ := misplaced(src, "@schema@"); len(bad) != 1 {
			t.Errorf("misplaced(%q) = %v; want one offset", src, bad)
		}
	}
	for _, src := range []string{"@schema@.t", "$$ SELECT @schema@.f() $$", "$x$ '' $x$ @schema@"} {
		if bad, _ := misplaced(src, "@schema@"); len(bad) != 0 {
			t.Errorf("misplaced(%q) = %v; want none", src, bad)
		}
	}
}

// installedBodies returns the bodies of the functions in the schema named
// name, as the server holds them, sorted.
func installedBodies(t testing.TB, pool *pgxpool.Pool, name string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1`, name)
	var bodies []string
	if err == nil {
		bodies, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(bodies)
	return bodies
}

// functionBodies returns the bodies of the functions schema.sql and
// sweep.sql define, as install writes them for the quoted schema name,
// sorted.
func functionBodies(quoted string) []string {
	var bodies []string
	parts := strings.Split(ddl(quoted, false), dollarTag(quoted))
	for i := 1; i < len(parts); i += 2 {
		bodies = append(bodies, parts[i])
	}
	slices.Sort(bodies)
	return bodies
}

// FuzzSchemaName checks on a real server that no schema name can change the
// SQL New runs (a name such as "a$$b" could end a function body early, and
// a name with a newline the comment it was spliced into). Every
// name of 1 to 63 bytes without NUL either is rejected with an error wrapping
// pace.ErrInvalidArgument, creating nothing, or works:
//
//   - the schema is created under exactly that name, and every catalog row
//     the installing transaction wrote (schemas, relations, functions,
//     types, databases, settings, triggers, extensions) belongs to it (or
//     to its tables' TOAST storage), so nothing else was created or
//     altered;
//   - its functions are exactly those of schema.sql, with bodies identical
//     to the template's with the quoted name in place of the placeholder;
//   - the meta table holds the one version row, and the store decides.
func FuzzSchemaName(f *testing.F) {
	for _, name := range []string{
		"pacefuzz",                         // a plain name
		"a$$b",                             // the reported one: ends a $$ body
		"$$",                               // nothing but a delimiter
		"$pgstore0$",                       // the first tag install tries
		"$pgstore0$$pgstore1$ $pgstore2$",  // the first three
		`x"y`,                              // a quote, doubled by the quoting
		`"`,                                // only a quote
		"x'y",                              // a string literal's quote
		"x\nCREATE TEMP TABLE pwned ();--", // a newline: would end a comment it stood in
		"x*/ CREATE TEMP TABLE pwned (); /*",
		"x\"; CREATE TEMP TABLE pwned (); --", // tries to close the identifier
		"UPPER case",                          // kept as it is
		"façade ☃",                            // UTF-8
		"a.b",                                 // a dot inside one identifier
		" ",                                   // a space
		"pg_catalog",                          // reserved: rejected
		"pg_x",                                // reserved: rejected
		strings.Repeat("é", 31) + "x",         // 63 bytes
	} {
		f.Add(name)
	}
	pool := testPool(f)
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" || len(name) > 63 || strings.IndexByte(name, 0) >= 0 {
			t.Skip("outside the names the docs allow")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		quoted := pgx.Identifier{name}.Sanitize()
		if _, err := newConfig([]Option{WithSchema(name)}); err != nil {
			// Rejected before any SQL is sent.
			if _, err := New(ctx, pool, WithSchema(name)); !errors.Is(err, pace.ErrInvalidArgument) {
				t.Fatalf("New(WithSchema(%+q)) = %v; want an error wrapping ErrInvalidArgument", name, err)
			}
			if utf8.ValidString(name) && !strings.HasPrefix(name, "pg_") {
				t.Errorf("New(WithSchema(%+q)) = %v; want a store: the docs allow this name", name, err)
			}
			return
		}
		// Fuzzing workers are processes of their own: one name at a time.
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		h := fnv.New64a()
		h.Write([]byte("pgstore FuzzSchemaName\x00" + name))
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(h.Sum64())); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, int64(h.Sum64())) }()
		var existed bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, name).Scan(&existed); err != nil {
			t.Fatal(err)
		}
		if existed {
			t.Skip("a schema of that name exists already: not ours to drop")
		}
		s, err := New(ctx, pool, WithSchema(name))
		if err != nil {
			_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE")
			t.Fatalf("New(WithSchema(%+q)) = %v; want a store, or an error wrapping ErrInvalidArgument", name, err)
		}
		defer func() { // before the lock is released (and after a Fatalf)
			if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
				t.Errorf("dropping schema %+q: %v", name, err)
			}
		}()

		// The transaction that created the schema wrote nothing outside it.
		var xid string
		if err := pool.QueryRow(ctx, `SELECT xmin::text FROM pg_namespace WHERE nspname = $1`, name).Scan(&xid); err != nil {
			t.Fatalf("schema %+q after New: %v", name, err)
		}
		var stray []string
		rows, err := pool.Query(ctx, `
			SELECT 'namespace ' || nspname FROM pg_namespace WHERE xmin::text = $1 AND nspname <> $2
			UNION ALL SELECT 'relation ' || c.oid::regclass::text FROM pg_class c WHERE c.xmin::text = $1
				AND c.relnamespace <> (SELECT oid FROM pg_namespace WHERE nspname = $2)
				AND c.oid NOT IN (SELECT o.reltoastrelid FROM pg_class o JOIN pg_namespace n ON n.oid = o.relnamespace
					WHERE n.nspname = $2)
				AND c.oid NOT IN (SELECT i.indexrelid FROM pg_index i JOIN pg_class o ON o.reltoastrelid = i.indrelid
					JOIN pg_namespace n ON n.oid = o.relnamespace WHERE n.nspname = $2)
			UNION ALL SELECT 'function ' || oid::regprocedure::text FROM pg_proc WHERE xmin::text = $1
				AND pronamespace <> (SELECT oid FROM pg_namespace WHERE nspname = $2)
			UNION ALL SELECT 'type ' || oid::regtype::text FROM pg_type WHERE xmin::text = $1
				AND typnamespace <> (SELECT oid FROM pg_namespace WHERE nspname = $2)
			UNION ALL SELECT 'database ' || datname FROM pg_database WHERE xmin::text = $1
			UNION ALL SELECT 'setting' FROM pg_db_role_setting WHERE xmin::text = $1
			UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger WHERE xmin::text = $1
			UNION ALL SELECT 'event trigger ' || evtname FROM pg_event_trigger WHERE xmin::text = $1
			UNION ALL SELECT 'extension ' || extname FROM pg_extension WHERE xmin::text = $1
			UNION ALL SELECT 'default acl' FROM pg_default_acl WHERE xmin::text = $1`, xid, name)
		if err == nil {
			stray, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(stray) > 0 {
			t.Errorf("New(WithSchema(%+q)) also wrote %v: the name changed the SQL", name, stray)
		}

		// The functions are the template's, and the name is only ever
		// the quoted identifier in their bodies.
		if bodies, want := installedBodies(t, pool, name), functionBodies(quoted); !slices.Equal(bodies, want) {
			t.Errorf("New(WithSchema(%+q)): %d function bodies that differ from the template's %d", name, len(bodies), len(want))
		}

		var version int
		if err := pool.QueryRow(ctx, `SELECT max(version) FROM `+quoted+`.meta HAVING count(*) = 1`).Scan(&version); err != nil || version != schemaVersion {
			t.Errorf("meta of %+q: version %d, %v; want one row, %d", name, version, err, schemaVersion)
		}
		for _, want := range []bool{true, false} {
			if ok, _, err := s.TokenBucket(ctx, "k", 1, 1.0/3600, 1); ok != want || err != nil {
				t.Fatalf("TokenBucket in schema %+q = %v, %v; want %v, nil", name, ok, err, want)
			}
		}
		if err := s.Delete(ctx, "k"); err != nil {
			t.Fatalf("Delete in schema %+q: %v", name, err)
		}
	})
}
