// Command gateway shows httplimit at an API gateway behind a trusted
// reverse proxy, with limits shared through Redis.
//
// It starts, on loopback, a gateway with two routes and a reverse proxy in
// front of it that appends the client's address to X-Forwarded-For, as
// load balancers do; the gateway trusts only the proxy's address. Then it
// plays a few clients and prints what the gateway decided:
//
//   - /api: a token bucket per client address in Redis (a burst of 10,
//     refilled at 5 per second, shared by every replica that uses the same
//     Redis), then a pace of 2 per second per API key (X-Api-Key) in the
//     process;
//   - /events: a stream of server-sent events, at most 2 at a time per
//     client address (Slots in Redis, refreshed while a stream runs);
//   - a client that forges X-Forwarded-For, or Forwarded, through the proxy
//     or straight to the gateway, and never picks the key it is counted
//     against.
//
// It needs a Redis server at PACE_REDIS_ADDR (default 127.0.0.1:6379), and
// exits by itself. From the repository root:
//
//	go run ./examples/gateway
//
// The example is its own module (so that the Redis client never enters the
// root module's dependencies), tied to the others by the repository's
// go.work.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/httplimit"
	"github.com/ratepace/pace/redisstore"
)

func main() {
	log.SetFlags(0)
	addr := os.Getenv("PACE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		log.Fatalf("gateway needs a Redis server at %s (set PACE_REDIS_ADDR): %v", addr, err)
	}
	// A fresh prefix per run, so that two runs do not share their buckets.
	store, err := redisstore.New(rdb, redisstore.WithPrefix("gateway-example-"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(context.Background())

	// The gateway listens on 127.0.0.1; the proxy reaches it from
	// 127.0.0.1 and the clients reach the proxy (or, forging, the gateway)
	// from 127.0.0.2 and up, where the system allows binding them.
	proxyAddr := netip.MustParsePrefix("127.0.0.1/32")
	clientIP, err := httplimit.ClientIPWith(
		httplimit.TrustProxies(proxyAddr),
		httplimit.ProxyHeader("X-Forwarded-For"), // what our proxy writes; a Forwarded header is then ignored
	)
	if err != nil {
		log.Fatal(err)
	}
	perKey, err := pace.New(2)
	if err != nil {
		log.Fatal(err)
	}
	api, err := httplimit.New([]httplimit.Limit{
		httplimit.Bucket(store, 10, 5, clientIP, httplimit.Name("per-address")),
		httplimit.Pace(perKey, httplimit.Header("X-Api-Key"), httplimit.Name("per-key")),
	})
	if err != nil {
		log.Fatal(err)
	}
	streams, err := httplimit.New([]httplimit.Limit{
		httplimit.Slots(store, 2, 30*time.Second, clientIP, httplimit.Name("streams")),
	})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/api", api.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})))
	release := make(chan struct{})
	mux.Handle("/events", streams.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: tick %d\n\n", i)
			if err := rc.Flush(); err != nil {
				return
			}
			select {
			case <-release:
				return
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})))
	// whoami answers with the key ClientIP reads, to show what a forger gets.
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		key, err := clientIP(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, key)
	})
	gateway := listen("127.0.0.1:0", mux)
	target, _ := url.Parse("http://" + gateway)
	proxy := listen("127.0.0.1:0", httputil.NewSingleHostReverseProxy(target)) // appends the client to X-Forwarded-For
	fmt.Printf("gateway on %s, behind a proxy on %s (Redis at %s)\n", gateway, proxy, addr)

	alice, distinct := clientFrom("127.0.0.2")
	mallory, _ := clientFrom("127.0.0.3")
	if !distinct {
		fmt.Println("(this system does not let clients bind 127.0.0.2: they share 127.0.0.1, the proxy's address, so the gateway trusts them too)")
	}

	fmt.Println("\n1. /api through the proxy: alice sends 14 requests in a row with 7 API keys")
	for i := range 14 {
		resp := send(alice, "GET", "http://"+proxy+"/api", "X-Api-Key: key-"+strconv.Itoa(i%7))
		discard(resp)
		if i == 0 {
			fmt.Printf("   RateLimit-Policy: %s\n", resp.Header.Get("RateLimit-Policy"))
		}
		fmt.Printf("   #%-2d key-%d  %d  RateLimit: %-22s Retry-After: %s\n", i+1, i%7, resp.StatusCode, resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
	}
	fmt.Println("   the per-address bucket (10) refused the last four; no key used more than its pace of 2")

	fmt.Println("\n2. mallory forges its address")
	for _, c := range []struct{ what, url, header string }{
		{"X-Forwarded-For through the proxy", "http://" + proxy + "/whoami", "X-Forwarded-For: 127.0.0.2"},
		{"Forwarded through the proxy", "http://" + proxy + "/whoami", "Forwarded: for=127.0.0.2"},
		{"X-Forwarded-For straight to the gateway", "http://" + gateway + "/whoami", "X-Forwarded-For: 127.0.0.2"},
	} {
		resp := send(mallory, "GET", c.url, c.header)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("   %-40s claims 127.0.0.2, counted as %s", c.what+":", body)
	}
	resp := send(mallory, "GET", "http://"+proxy+"/api", "X-Forwarded-For: 203.0.113.9, unknown", "X-Api-Key: m")
	discard(resp)
	fmt.Printf("   a forged X-Forwarded-For only adds entries left of the proxy's: /api answers %d, counted as mallory\n", resp.StatusCode)

	fmt.Println("\n3. /events through the proxy: at most 2 streams at a time per address")
	var wg sync.WaitGroup
	open := func(n int) {
		resp := send(alice, "GET", "http://"+proxy+"/events")
		if resp.StatusCode != http.StatusOK {
			fmt.Printf("   stream %d: %d, Retry-After %s\n", n, resp.StatusCode, resp.Header.Get("Retry-After"))
			discard(resp)
			return
		}
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		fmt.Printf("   stream %d: %d, first event %q\n", n, resp.StatusCode, strings.TrimSpace(line))
		wg.Add(1)
		go func() {
			defer wg.Done()
			discard(resp) // until the gateway ends the stream
		}()
	}
	open(1)
	open(2)
	open(3)
	close(release) // the streams end, and give their slots back
	wg.Wait()
	open(4)
	wg.Wait()
	fmt.Println("   (a stream's slot is refreshed in Redis every 10 s while it runs, and expires 30 s after a crash)")
}

// listen serves h on addr and returns the address it listens on.
func listen(addr string, h http.Handler) string {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	go (&http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}).Serve(ln)
	return ln.Addr().String()
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip, or from the default one when the system does not
// allow binding it (ok false).
func clientFrom(ip string) (c *http.Client, ok bool) {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	local := &net.TCPAddr{IP: net.ParseIP(ip)}
	if ln, err := net.ListenTCP("tcp", local); err == nil {
		ln.Close()
		dialer.LocalAddr, ok = local, true
	}
	return &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}, Timeout: 10 * time.Second}, ok
}

// discard reads resp's body to its end and closes it.
func discard(resp *http.Response) {
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// send makes a request with the given header lines ("Name: value") and
// returns the response; the caller reads or ignores the body.
func send(c *http.Client, method, url string, lines ...string) *http.Response {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range lines {
		name, value, _ := strings.Cut(l, ": ")
		req.Header.Add(name, value)
	}
	resp, err := c.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	return resp
}
