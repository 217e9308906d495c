package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/grpclimit"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/memory"
)

// TestUnaryRefusalRetryInfo: a unary call over the pace is refused with
// ResourceExhausted and a RetryInfo whose delay is exact: a client that
// waits 1 ns less is refused again, one that waits the delay is admitted.
func TestUnaryRefusalRetryInfo(t *testing.T) {
	clk := newClock()
	p := newPace(t, 3, clk) // an interval of 333333334 ns: the delay is not round
	var c counter
	s := &server{}
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(p, grpclimit.ClientIP(), grpclimit.Name("per-peer")),
	}, c.Option()), s)

	for i := range 3 {
		if err := check(t, client, ""); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	delay := refusal(t, check(t, client, ""), "per-peer")
	if delay <= 0 || delay > time.Second {
		t.Fatalf("retry delay %v; want in (0, 1s]", delay)
	}
	clk.Advance(delay - time.Nanosecond)
	if d := refusal(t, check(t, client, ""), "per-peer"); d != time.Nanosecond {
		t.Fatalf("1 ns before the delay: retry delay %v; want 1ns", d)
	}
	clk.Advance(time.Nanosecond)
	if err := check(t, client, ""); err != nil {
		t.Fatalf("after waiting the retry delay: %v; want admitted", err)
	}
	if got := s.ran(""); got != 4 {
		t.Fatalf("handler ran %d times; want 4 (never for a refused call)", got)
	}
	if got := c.Get("per-peer", httplimit.Refused); got != 2 {
		t.Fatalf("refused %d; want 2", got)
	}
}

// TestStreamRefusal: a streaming call over the pace fails with
// ResourceExhausted and its details before its handler runs.
func TestStreamRefusal(t *testing.T) {
	clk := newClock()
	s := &server{}
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(newPace(t, 1, clk), grpclimit.FullMethod(), grpclimit.Name("per-method")),
	}), s)
	close(s.end) // every Watch ends after its first message

	watch := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		for {
			if _, err := st.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	if err := watch(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if d := refusal(t, watch(), "per-method"); d != time.Second {
		t.Fatalf("retry delay %v; want 1s", d)
	}
	// The key is the method: Check is another key, with its own pace.
	if err := check(t, client, ""); err != nil {
		t.Fatalf("Check under a per-method limit spent by Watch: %v", err)
	}
	if got := s.ran("watch "); got != 1 {
		t.Fatalf("Watch handler ran %d times; want 1", got)
	}
	clk.Advance(time.Second)
	if err := watch(); err != nil {
		t.Fatalf("after the retry delay: %v", err)
	}
}

// TestAllOrNothing: limits are decided all or nothing: a call refused by
// the per-client limit spends nothing of the per-peer limit, nor of a Store
// Bucket decided before both (its token refunded).
func TestAllOrNothing(t *testing.T) {
	clk := newClock()
	store := memory.New(memory.WithClock(clk.Now))
	var c counter
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Bucket(store, 3, 1, grpclimit.ClientIP(), grpclimit.Name("bucket")),
		grpclimit.Pace(newPace(t, 2, clk), grpclimit.ClientIP(), grpclimit.Name("per-peer")),
		grpclimit.Pace(newPace(t, 1, clk), grpclimit.Metadata("client-id"), grpclimit.Name("per-client")),
	}, c.Option()), &server{})

	if err := check(t, client, "", "client-id", "a"); err != nil {
		t.Fatal(err)
	}
	refusal(t, check(t, client, "", "client-id", "a"), "per-client") // per-peer and bucket given back
	if err := check(t, client, "", "client-id", "b"); err != nil {
		t.Fatalf("second per-peer event: %v; the refusal spent it", err)
	}
	refusal(t, check(t, client, "", "client-id", "c"), "per-peer")
	if err := check(t, client, "", "client-id", "a"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a third call: %v", err)
	}
	// Two admitted calls: each limit spent two, whatever was refused.
	for _, name := range []string{"bucket", "per-peer", "per-client"} {
		if got := c.Spent(name); got != 2 {
			t.Fatalf("%s spent %d; want 2", name, got)
		}
	}
	if got := c.Get("per-peer", httplimit.Returned); got != 1 {
		t.Fatalf("per-peer returned %d; want 1, for the refusal by per-client", got)
	}
	if got := c.Get("bucket", httplimit.Returned); got != 3 {
		t.Fatalf("bucket returned %d; want 3, one per refused call", got)
	}
}

// TestPeerKeysIgnoreForgedMetadata: ClientIP keys a call by its peer's
// address; forwarding metadata is read only when the peer is a trusted
// proxy, and then from the right, so a client cannot choose its key.
func TestPeerKeysIgnoreForgedMetadata(t *testing.T) {
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	other := netip.MustParsePrefix("10.0.0.0/8")
	cases := []struct {
		name    string
		trusted []netip.Prefix
		md      []string
		want    string     // the key
		code    codes.Code // when the key is refused
	}{
		{"no proxy, no metadata", nil, nil, "127.0.0.1", codes.OK},
		{"no proxy, forged x-forwarded-for", nil, []string{"x-forwarded-for", "203.0.113.7"}, "127.0.0.1", codes.OK},
		{"no proxy, forged forwarded", nil, []string{"forwarded", "for=198.51.100.9"}, "127.0.0.1", codes.OK},
		{"untrusted peer, forged headers", []netip.Prefix{other}, []string{"x-forwarded-for", "10.1.2.3", "forwarded", "for=10.1.2.3"}, "127.0.0.1", codes.OK},
		{"trusted peer, no metadata", []netip.Prefix{loopback}, nil, "127.0.0.1", codes.OK},
		{"trusted proxy appends", []netip.Prefix{loopback}, []string{"x-forwarded-for", "6.6.6.6, 203.0.113.7"}, "203.0.113.7", codes.OK},
		{"two trusted hops", []netip.Prefix{loopback}, []string{"x-forwarded-for", "6.6.6.6, 203.0.113.7, 127.0.0.9"}, "203.0.113.7", codes.OK},
		{"forwarded from the right", []netip.Prefix{loopback}, []string{"forwarded", `for=6.6.6.6, for="[2001:db8:1:2::5]:443"`}, "2001:db8:1:2::/64", codes.OK},
		{"lines in order", []netip.Prefix{loopback}, []string{"x-forwarded-for", "6.6.6.6", "x-forwarded-for", "203.0.113.7"}, "203.0.113.7", codes.OK},
		{"headers disagree", []netip.Prefix{loopback}, []string{"x-forwarded-for", "203.0.113.7", "forwarded", "for=203.0.113.8"}, "", codes.InvalidArgument},
		{"unknown at the deciding position", []netip.Prefix{loopback}, []string{"forwarded", "for=unknown"}, "", codes.InvalidArgument},
		{"garbage at the deciding position", []netip.Prefix{loopback}, []string{"x-forwarded-for", "203.0.113.7, not-an-address"}, "", codes.InvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			ip := grpclimit.ClientIP(tc.trusted...)
			key := func(ctx context.Context, m string) (string, error) {
				k, err := ip(ctx, m)
				mu.Lock()
				got = append(got, k)
				mu.Unlock()
				return k, err
			}
			s := &server{}
			client := serve(t, mustNew(t, []grpclimit.Limit{
				grpclimit.Pace(newPace(t, 100, newClock()), key, grpclimit.Name("per-ip")),
			}), s)
			err := check(t, client, "", tc.md...)
			wantCode(t, err, tc.code, "call")
			mu.Lock()
			defer mu.Unlock()
			if tc.code != codes.OK {
				msg := status.Convert(err).Message()
				if !strings.HasPrefix(msg, `grpclimit: limit "per-ip": `) || strings.Contains(msg, "203.0.113") || strings.Contains(msg, "not-an-address") {
					t.Fatalf("message %q: want the limit and the reason, without the client's text", msg)
				}
				if s.ran("") != 0 {
					t.Fatal("the handler ran for a call whose key was refused")
				}
				return
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("keys %q; want [%q]", got, tc.want)
			}
		})
	}
}

// TestForgedMetadataSpendsNothingOfThePeer: a client that sends forged
// forwarding metadata, each call a different address, is one key.
func TestForgedMetadataSpendsNothingOfThePeer(t *testing.T) {
	clk := newClock()
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(newPace(t, 2, clk), grpclimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8")), grpclimit.Name("per-ip")),
	}), &server{})
	admitted := 0
	for i := range 10 {
		err := check(t, client, "", "x-forwarded-for", netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}).String())
		if err == nil {
			admitted++
		} else {
			wantCode(t, err, codes.ResourceExhausted, "forged call")
		}
	}
	if admitted != 2 {
		t.Fatalf("%d calls with forged addresses admitted; want 2, the peer's pace", admitted)
	}
}

// TestSlotHeldForStreamLife: a Slots limit holds its slot while a stream
// lives, however long (refreshed before its ttl runs out), refuses a second
// stream meanwhile, and frees the slot when the stream ends.
func TestSlotHeldForStreamLife(t *testing.T) {
	clk := newClock()
	spy := &refreshSpy{Store: memory.New(memory.WithClock(clk.Now)), refreshed: make(chan struct{})}
	const ttl = 30 * time.Millisecond // of real time between refreshes; the store's own clock is clk
	var c counter
	s := &server{}
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Slots(spy, 1, ttl, grpclimit.ClientIP(), grpclimit.Name("streams")),
	}, c.Option()), s)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func() (healthpb.Health_WatchClient, error) {
		st, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return nil, err
		}
		_, err = st.Recv() // the handler runs: the slot is held
		return st, err
	}
	first, err := open()
	if err != nil {
		t.Fatalf("first stream: %v", err)
	}
	// Twice, let most of a ttl pass and see the slot refreshed after: the
	// stream outlives its ttl twice over.
	for range 2 {
		clk.Advance(ttl - time.Nanosecond)
		spy.waitRefreshes(t, 2) // the second began after the first ended, so after the advance
	}
	clk.Advance(ttl - time.Nanosecond)
	if _, err := open(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second stream while the first lives, twice past its ttl: %v; want ResourceExhausted", err)
	} else if d := refusal(t, err, "streams"); d != time.Second {
		t.Fatalf("slot refusal retry delay %v; want 1s", d)
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a unary call while the stream lives: %v; want ResourceExhausted", err)
	}

	close(s.end) // the first stream's handler returns
	if _, err := first.Recv(); err != io.EOF {
		t.Fatalf("first stream's end: %v; want io.EOF", err)
	}
	// The client sees the end only after the interceptor has returned, and
	// so after it released the slot.
	third, err := open()
	if err != nil {
		t.Fatalf("a stream after the first ended: %v; want admitted", err)
	}
	if _, err := third.Recv(); err != io.EOF {
		t.Fatalf("third stream's end: %v", err)
	}
	if got := c.Get("streams", httplimit.Admitted); got != 2 {
		t.Fatalf("streams admitted %d; want 2", got)
	}
}

// refreshSpy is a Store that tells each RefreshSlot that returned to a
// receiver waiting on refreshed (and drops it when none waits).
type refreshSpy struct {
	pace.Store
	refreshed chan struct{}
}

func (s *refreshSpy) RefreshSlot(ctx context.Context, key string, ttl time.Duration) error {
	err := s.Store.RefreshSlot(ctx, key, ttl)
	select {
	case s.refreshed <- struct{}{}:
	default:
	}
	return err
}

// waitRefreshes waits for n refreshes to return while it waits.
func (s *refreshSpy) waitRefreshes(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-s.refreshed:
		case <-timeout:
			t.Fatal("no slot refresh within 10 s")
		}
	}
}

// TestSlotReleasedWhenClientCancels: a stream the client abandons gives its
// slot back when its handler returns.
func TestSlotReleasedWhenClientCancels(t *testing.T) {
	ic := mustNew(t, []grpclimit.Limit{grpclimit.Slots(memory.New(), 1, time.Minute, grpclimit.ClientIP(), grpclimit.Name("streams"))})
	ended := make(chan error, 1)
	// Outside the limits: it sees the stream end after they have finished.
	outer := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		err := handler(srv, ss)
		ended <- err
		return err
	}
	client := serve(t, ic, &server{}, grpc.ChainStreamInterceptor(outer))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	refusal(t, check(t, client, ""), "streams")
	cancel()
	wantCode(t, <-ended, codes.Canceled, "the abandoned stream's handler")
	if err := check(t, client, ""); err != nil {
		t.Fatalf("after the abandoned stream ended: %v; want its slot free", err)
	}
}

// TestReturnOnCode: a limit with ReturnOn(codes.Unauthenticated) gives
// back the calls its handler answers Unauthenticated, so a forger costs
// the client nothing; other codes spend.
func TestReturnOnCode(t *testing.T) {
	clk := newClock()
	var c counter
	s := &server{}
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(newPace(t, 1, clk), grpclimit.Metadata("client-id"), grpclimit.Name("per-client"),
			grpclimit.ReturnOn(codes.Unauthenticated, codes.InvalidArgument)),
	}, c.Option()), s)

	for range 20 {
		wantCode(t, check(t, client, svcUnauthenticated, "client-id", "app-1"), codes.Unauthenticated, "forger")
	}
	if err := check(t, client, "", "client-id", "app-1"); err != nil {
		t.Fatalf("the client after 20 forgeries: %v; want admitted", err)
	}
	// PermissionDenied is not a ReturnOn code: it spends.
	wantCode(t, check(t, client, svcDenied, "client-id", "app-2"), codes.PermissionDenied, "denied")
	refusal(t, check(t, client, "", "client-id", "app-2"), "per-client")
	if got := c.Get("per-client", httplimit.Returned); got != 20 {
		t.Fatalf("returned %d; want 20", got)
	}
}

// TestReturnAndVerified: the handler gives reservations back with Return,
// and takes DecideAfterVerify events with Verified, whose refusal it
// returns.
func TestReturnAndVerified(t *testing.T) {
	clk := newClock()
	perClient := newPace(t, 1, clk)
	s := &server{}
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(newPace(t, 1, clk), grpclimit.Metadata("api-key"), grpclimit.Name("per-key")),
		grpclimit.Pace(perClient, grpclimit.Metadata("client-id"), grpclimit.Name("per-client"), grpclimit.DecideAfterVerify()),
	}), s)

	// Return gives back per-key; per-client was only looked at.
	for range 3 {
		if err := check(t, client, svcReturn, "api-key", "k1", "client-id", "c1"); err != nil {
			t.Fatalf("Return: %v", err)
		}
	}
	if perClient.Len() != 0 {
		t.Fatalf("per-client holds %d keys after calls that only looked; want 0", perClient.Len())
	}
	// A call verified takes the client's event; the next is refused by the look.
	if err := check(t, client, svcVerify, "api-key", "k2", "client-id", "c1"); err != nil {
		t.Fatalf("Verified: %v", err)
	}
	refusal(t, check(t, client, svcVerify, "api-key", "k3", "client-id", "c1"), "per-client")
	// The look admits, but another call takes the event before Verified:
	// Verified returns the refusal, and per-key is given back.
	s.before = func(context.Context) { perClient.Allow("c2") }
	refusal(t, check(t, client, svcVerify, "api-key", "k4", "client-id", "c2"), "per-client")
	s.before = nil
	if err := check(t, client, "", "api-key", "k4", "client-id", "c9"); err != nil {
		t.Fatalf("k4 after its refusal by Verified: %v; want its event given back", err)
	}
}

// TestKeyErrors: a key that cannot be read fails the call with
// InvalidArgument and a clear message that never contains the key, runs
// no handler, and spends nothing of the other limits.
func TestKeyErrors(t *testing.T) {
	clk := newClock()
	var c counter
	s := &server{}
	secret := strings.Repeat("SECRET", 200) // 1200 bytes, over httplimit.MaxKeyLen
	own := func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("tenant"); len(v) == 1 && v[0] != "" {
			return v[0], nil
		}
		return "", errors.New("no tenant in " + strings.Join(md.Get("api-key"), ","))
	}
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(newPace(t, 1, clk), grpclimit.ClientIP(), grpclimit.Name("per-ip")),
		grpclimit.Pace(newPace(t, 100, clk), grpclimit.Metadata("api-key"), grpclimit.Name("per-key")),
		grpclimit.Pace(newPace(t, 100, clk), own, grpclimit.Name("per-tenant")),
	}, c.Option()), s)

	cases := []struct {
		name   string
		md     []string
		limit  string
		reason string
	}{
		{"absent", nil, "per-key", "the key metadata is absent or empty"},
		{"empty", []string{"api-key", ""}, "per-key", "the key metadata is absent or empty"},
		{"twice", []string{"api-key", "SECRET1", "api-key", "SECRET2"}, "per-key", "the key metadata appears more than once"},
		{"too long", []string{"api-key", secret}, "per-key", "the key is longer than MaxKeyLen"},
		{"own KeyFunc", []string{"api-key", "SECRET3"}, "per-tenant", "the call's key could not be read"},
	}
	for _, tc := range cases {
		err := check(t, client, "", tc.md...)
		wantCode(t, err, codes.InvalidArgument, tc.name)
		want := `grpclimit: limit "` + tc.limit + `": ` + tc.reason
		if msg := status.Convert(err).Message(); msg != want || strings.Contains(msg, "SECRET") {
			t.Fatalf("%s: message %q; want %q", tc.name, msg, want)
		}
	}
	if s.ran("") != 0 {
		t.Fatal("a handler ran for a call whose key was refused")
	}
	// per-ip (1/s) was given back each time: it still admits.
	if err := check(t, client, "", "api-key", "k", "tenant", "t"); err != nil {
		t.Fatalf("after key errors: %v; want per-ip unspent", err)
	}
	if got := c.Get("per-key", httplimit.KeyFailed); got != 4 {
		t.Fatalf("per-key key errors %d; want 4", got)
	}
}

// TestKeyFuncConfig: key functions built with an invalid configuration
// fail every call with an error wrapping pace.ErrInvalidArgument, and a
// call without a peer address is a fault of the server: codes.Internal.
func TestKeyFuncConfig(t *testing.T) {
	bad := grpclimit.Metadata("not a key!")
	if _, err := bad(context.Background(), "/m"); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Fatalf("Metadata with an invalid name: %v; want ErrInvalidArgument", err)
	}
	if _, err := grpclimit.ClientIP(netip.Prefix{})(context.Background(), "/m"); !errors.Is(err, pace.ErrInvalidArgument) {
		t.Fatalf("ClientIP with an invalid prefix: %v; want ErrInvalidArgument", err)
	}
	if _, err := grpclimit.ClientIPWith(httplimit.IPv6Bits(0)); !errors.Is(err, pace.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "grpclimit: ") {
		t.Fatalf("ClientIPWith(IPv6Bits(0)): %v", err)
	}
	var ke *grpclimit.KeyError
	if _, err := grpclimit.ClientIP()(context.Background(), "/m"); !errors.As(err, &ke) || ke.Code != codes.Internal {
		t.Fatalf("ClientIP without a peer: %v; want a KeyError with codes.Internal", err)
	}
}

// TestStoreErrors: a Store error fails the call with Unavailable, without
// the store's error text, and gives back what the earlier limits took.
func TestStoreErrors(t *testing.T) {
	clk := newClock()
	store := memory.New(memory.WithClock(clk.Now))
	var c counter
	s := &server{}
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(newPace(t, 1, clk), grpclimit.ClientIP(), grpclimit.Name("per-ip")),
		grpclimit.Bucket(store, 10, 10, grpclimit.ClientIP(), grpclimit.Name("shared")),
	}, c.Option()), s)
	store.Close(context.Background())
	for range 3 {
		err := check(t, client, "")
		wantCode(t, err, codes.Unavailable, "closed store")
		if msg := status.Convert(err).Message(); msg != `grpclimit: limit "shared": the limit's store is unavailable` {
			t.Fatalf("message %q", msg)
		}
	}
	if s.ran("") != 0 || c.Get("shared", httplimit.StoreFailed) != 3 || c.Spent("per-ip") != 0 {
		t.Fatalf("handler runs %d, store errors %d, per-ip spent %d; want 0, 3, 0",
			s.ran(""), c.Get("shared", httplimit.StoreFailed), c.Spent("per-ip"))
	}
}

// TestDryRun: under httplimit.DryRun, refused calls, key errors and store
// errors are served, and counted.
func TestDryRun(t *testing.T) {
	clk := newClock()
	var c counter
	s := &server{}
	client := serve(t, mustNew(t, []grpclimit.Limit{
		grpclimit.Pace(newPace(t, 1, clk), grpclimit.Metadata("client-id"), grpclimit.Name("per-client")),
		grpclimit.Pace(newPace(t, 1, clk), grpclimit.ClientIP(), grpclimit.Name("per-ip")),
	}, httplimit.DryRun(), c.Option()), s)
	for range 3 {
		if err := check(t, client, "", "client-id", "a"); err != nil {
			t.Fatalf("dry run: %v", err)
		}
	}
	if err := check(t, client, ""); err != nil {
		t.Fatalf("dry run, key error: %v", err)
	}
	if s.ran("") != 4 || c.Get("per-client", httplimit.Refused) != 2 || c.Get("per-client", httplimit.KeyFailed) != 1 {
		t.Fatalf("runs %d, per-client refused %d, key errors %d; want 4, 2, 1",
			s.ran(""), c.Get("per-client", httplimit.Refused), c.Get("per-client", httplimit.KeyFailed))
	}
	if got := c.Spent("per-ip"); got != 1 {
		t.Fatalf("per-ip spent %d; want 1 (a refusal in a dry run gives back as in earnest)", got)
	}
}

// TestNewErrors: invalid configurations are errors wrapping
// pace.ErrInvalidArgument, with the package's prefix.
func TestNewErrors(t *testing.T) {
	p, _ := pace.New(1)
	s := memory.New()
	sh, err := pace.NewShared(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	key := grpclimit.ClientIP()
	cases := []struct {
		name   string
		limits []grpclimit.Limit
	}{
		{"no limits", nil},
		{"zero Limit", []grpclimit.Limit{{}}},
		{"nil KeyFunc", []grpclimit.Limit{grpclimit.Pace(p, nil)}},
		{"nil pace", []grpclimit.Limit{grpclimit.Pace(nil, key)}},
		{"code not canonical", []grpclimit.Limit{grpclimit.Pace(p, key, grpclimit.ReturnOn(codes.Code(17)))}},
		{"nil Shared", []grpclimit.Limit{grpclimit.Shared(nil, key)}},
		{"DecideAfterVerify on a Shared", []grpclimit.Limit{grpclimit.Shared(sh, key, grpclimit.DecideAfterVerify())}},
		{"ReturnOn on Slots", []grpclimit.Limit{grpclimit.Slots(s, 1, time.Second, key, grpclimit.ReturnOn(codes.Unauthenticated))}},
		{"DecideAfterVerify on Slots", []grpclimit.Limit{grpclimit.Slots(s, 1, time.Second, key, grpclimit.DecideAfterVerify())}},
		{"bad Bucket", []grpclimit.Limit{grpclimit.Bucket(s, 0, 1, key)}},
		{"bad Slots", []grpclimit.Limit{grpclimit.Slots(s, 0, time.Second, key)}},
		{"bad name", []grpclimit.Limit{grpclimit.Pace(p, key, grpclimit.Name(""))}},
		{"same name", []grpclimit.Limit{grpclimit.Pace(p, key, grpclimit.Name("x")), grpclimit.Pace(p, key, grpclimit.Name("x"))}},
	}
	for _, tc := range cases {
		ic, err := grpclimit.New(tc.limits)
		if ic != nil || !errors.Is(err, pace.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "grpclimit: ") {
			t.Errorf("%s: New = %v, %v; want an error wrapping ErrInvalidArgument", tc.name, ic, err)
		}
	}
	ic := mustNew(t, []grpclimit.Limit{grpclimit.Pace(p, key), grpclimit.Slots(s, 1, time.Second, key),
		grpclimit.Shared(sh, key), grpclimit.Bucket(s, 1, 1, key, grpclimit.ReturnOn(codes.Unauthenticated))})
	if got := strings.Join(ic.Names(), ","); got != "pace-0,slots-1,shared-2,bucket-3" {
		t.Fatalf("Names = %s", got)
	}
}

// TestStoreLimitsReturn: a Shared limit and a Bucket limit, over the real
// loopback server, give their reservation back through the store when the
// handler answers a ReturnOn code, and when it calls Return: twenty forged
// calls cost the client nothing, and a call that returned leaves the room
// to the next; a call that is not given back spends, and the next is
// refused with the wait until one fits.
func TestStoreLimitsReturn(t *testing.T) {
	for _, kind := range []string{"shared", "bucket"} {
		t.Run(kind, func(t *testing.T) {
			clk := newClock()
			st := memory.New(memory.WithClock(clk.Now))
			t.Cleanup(func() { st.Close(context.Background()) })
			opts := []grpclimit.LimitOption{grpclimit.Name("per-client"), grpclimit.ReturnOn(codes.Unauthenticated)}
			lim := grpclimit.Bucket(st, 1, 1, grpclimit.Metadata("client-id"), opts...)
			if kind == "shared" {
				p, err := pace.NewShared(st, 1, pace.WithClock(clk.Now))
				if err != nil {
					t.Fatal(err)
				}
				lim = grpclimit.Shared(p, grpclimit.Metadata("client-id"), opts...)
			}
			var c counter
			client := serve(t, mustNew(t, []grpclimit.Limit{lim}, c.Option()), &server{})
			for range 20 {
				wantCode(t, check(t, client, svcUnauthenticated, "client-id", "app-1"), codes.Unauthenticated, "forger")
			}
			for range 3 {
				if err := check(t, client, svcReturn, "client-id", "app-1"); err != nil {
					t.Fatalf("a call that returns: %v; want admitted", err)
				}
			}
			if err := check(t, client, "", "client-id", "app-1"); err != nil {
				t.Fatalf("the client after 20 forgeries and 3 returns: %v; want admitted", err)
			}
			if wait := refusal(t, check(t, client, "", "client-id", "app-1"), "per-client"); wait != time.Second {
				t.Fatalf("retry delay %v; want 1s", wait)
			}
			clk.Advance(time.Second)
			if err := check(t, client, "", "client-id", "app-1"); err != nil {
				t.Fatalf("after the retry delay: %v; want admitted", err)
			}
			if got := c.Get("per-client", httplimit.Returned); got != 23 {
				t.Fatalf("returned %d; want 23", got)
			}
		})
	}
}

// TestReturnThroughChainedInterceptors: Return gives back the reservations
// of every Interceptor the call went through, not only the innermost one;
// without an Interceptor, Return and Verified do nothing.
func TestReturnThroughChainedInterceptors(t *testing.T) {
	clk := newClock()
	outer := mustNew(t, []grpclimit.Limit{grpclimit.Pace(newPace(t, 1, clk), grpclimit.Metadata("api-key"), grpclimit.Name("outer"))})
	inner := mustNew(t, []grpclimit.Limit{grpclimit.Pace(newPace(t, 1, clk), grpclimit.Metadata("api-key"), grpclimit.Name("inner"))})
	s := &server{}
	client := serve(t, inner, s, outer.ServerOptions()...)

	for i := range 3 {
		if err := check(t, client, svcReturn, "api-key", "k1"); err != nil {
			t.Fatalf("call %d after Return: %v; want both limits given back", i, err)
		}
	}
	if got := s.ran(svcReturn); got != 3 {
		t.Fatalf("handler ran %d times; want 3", got)
	}
	// Without Return, the second call is refused, by the outer limit first.
	if err := check(t, client, "", "api-key", "k2"); err != nil {
		t.Fatalf("first call of k2: %v", err)
	}
	refusal(t, check(t, client, "", "api-key", "k2"), "outer")

	grpclimit.Return(context.Background())
	if err := grpclimit.Verified(context.Background()); err != nil {
		t.Fatalf("Verified without an Interceptor: %v; want nil", err)
	}
}
