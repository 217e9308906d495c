// Command connections shows the sustained/ceiling burst model guarding
// per-player connections to a chat or game server.
//
// It starts a line-based TCP server on 127.0.0.1 (a random port) that admits
// each connection with Store.AcquireSlotBurst on the player's name, keeps it
// alive with a RefreshSlotBurst heartbeat, and releases it with
// ReleaseSlotBurst when the player says BYE. A player may hold 4 connections
// at all times (sustained), and up to 8 (the ceiling) while burst budget
// lasts: 10 minutes of full-2× time, refilled over pace.BurstRefillWindow
// (an hour) at or below sustained.
//
// The memory store reads a clock that runs 600 times faster than the wall
// clock (through memory.WithClock), so an hour of the model passes in six
// seconds. The program then plays the players itself and prints, in model
// time, what the server decided:
//
//   - sustained connections always admitted;
//   - a burst above sustained admitted while budget lasts;
//   - the ceiling holding, and heartbeats keeping connections alive past
//     their idle TTL;
//   - the budget spent, then refilling at or below sustained.
//
// It exits by itself after about seven seconds.
//
//	go run ./examples/connections
package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/memory"
)

const (
	scale     = 600 // model seconds per wall-clock second
	sustained = 4
	ceiling   = 8
	budget    = 10 * time.Minute // of full-2× time
	ttl       = 20 * time.Minute // idle survival without a heartbeat
	heartbeat = 5 * time.Minute  // well within ttl
)

var start = time.Now()

// modelNow is the store's clock: model time runs scale times faster.
func modelNow() time.Time { return start.Add(time.Since(start) * scale) }

// wall converts a model duration to the wall-clock time it takes.
func wall(d time.Duration) time.Duration { return d / scale }

func logf(format string, args ...any) {
	el := modelNow().Sub(start).Round(time.Second)
	fmt.Printf("[model %02d:%02d] %s\n", int(el.Minutes()), int(el.Seconds())%60, fmt.Sprintf(format, args...))
}

// server admits connections per player.
type server struct {
	store pace.Store
	ln    net.Listener
	wg    sync.WaitGroup
}

func (s *server) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // listener closed
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
		}()
	}
}

// handle speaks the protocol: the client sends "HELLO name", the server
// answers "WELCOME n" or "BUSY n ceiling|budget"; a welcomed client sends
// "BYE" when it leaves, and the server answers "BYE" once its slot is
// released.
func (s *server) handle(c net.Conn) {
	defer c.Close()
	ctx := context.Background()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	player, ok := strings.CutPrefix(strings.TrimSpace(line), "HELLO ")
	if err != nil || !ok {
		return
	}
	admitted, n, err := s.store.AcquireSlotBurst(ctx, player, sustained, ceiling, budget, ttl)
	switch {
	case err != nil:
		fmt.Fprintf(c, "ERROR %v\n", err)
		return
	case !admitted && n >= ceiling:
		fmt.Fprintf(c, "BUSY %d ceiling\n", n)
		return
	case !admitted:
		fmt.Fprintf(c, "BUSY %d budget\n", n)
		return
	}
	fmt.Fprintf(c, "WELCOME %d\n", n)

	// Heartbeat while the connection lives, so that a player holding a
	// connection longer than the idle TTL keeps its slot.
	stop := make(chan struct{})
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		t := time.NewTicker(wall(heartbeat))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := s.store.RefreshSlotBurst(ctx, player, ttl); err != nil {
					log.Printf("heartbeat for %s: %v", player, err)
				}
			}
		}
	}()
	_, _ = r.ReadString('\n') // BYE, or the connection closing
	close(stop)
	<-beats
	if err := s.store.ReleaseSlotBurst(ctx, player); err != nil {
		log.Printf("release for %s: %v", player, err)
	}
	fmt.Fprintf(c, "BYE\n")
}

// client is one player's side.
type client struct {
	addr   string
	player string
	conns  []net.Conn
}

// connect opens one connection and reports the server's answer.
func (p *client) connect() bool {
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(c, "HELLO %s\n", p.player)
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	f := strings.Fields(answer)
	switch f[0] {
	case "WELCOME":
		p.conns = append(p.conns, c)
		logf("%s connection #%s: admitted", p.player, f[1])
		return true
	case "BUSY":
		c.Close()
		if f[2] == "ceiling" {
			logf("%s: refused at the ceiling (%s of %d held)", p.player, f[1], ceiling)
		} else {
			logf("%s: refused, burst budget spent (%s held, below the ceiling of %d)", p.player, f[1], ceiling)
		}
		return false
	}
	log.Fatalf("unexpected answer %q", answer)
	return false
}

// leave closes n connections, each once the server has released its slot.
func (p *client) leave(n int) {
	for range n {
		c := p.conns[len(p.conns)-1]
		p.conns = p.conns[:len(p.conns)-1]
		fmt.Fprintf(c, "BYE\n")
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			log.Fatal(err)
		}
		c.Close()
	}
	logf("%s left %d, now holds %d", p.player, n, len(p.conns))
}

func (p *client) connectN(n int) {
	for range n {
		p.connect()
	}
}

// hold lets model time d pass while the connections stay open.
func hold(d time.Duration) {
	logf("... %v pass", d)
	time.Sleep(wall(d))
}

func main() {
	store := memory.New(memory.WithClock(modelNow))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &server{store: store, ln: ln}
	go srv.serve()
	fmt.Printf("server on %s: sustained %d, ceiling %d, budget %v, one model hour every %v\n\n",
		ln.Addr(), sustained, ceiling, budget, wall(time.Hour))

	alice := &client{addr: ln.Addr().String(), player: "alice"}
	bob := &client{addr: ln.Addr().String(), player: "bob"}

	fmt.Println("Up to sustained, always admitted:")
	alice.connectN(sustained)
	fmt.Println("\nA burst above sustained, while budget lasts:")
	alice.connectN(ceiling - sustained)
	fmt.Println("\nThe ceiling holds; other players are unaffected:")
	alice.connect()
	bob.connectN(2)

	fmt.Println("\nCamping at the ceiling (2×) drains the budget 1:1; heartbeats outlive the 20m TTL:")
	hold(25 * time.Minute)
	alice.connect() // still 8 held: the heartbeats kept them
	alice.leave(1)
	alice.connect() // 7 held, below the ceiling, but no budget left

	fmt.Println("\nBack within sustained: admitted even with the budget spent:")
	alice.leave(4)
	alice.connect()

	fmt.Println("\nAt or below sustained the budget refills over an hour: 30m gives back 5m:")
	hold(30 * time.Minute)
	alice.connectN(ceiling - sustained) // a burst again
	hold(3 * time.Minute)               // 3m of the 5m spent
	alice.leave(1)
	alice.connect() // budget left: admitted
	hold(4 * time.Minute)
	alice.leave(1)
	alice.connect() // the refill is spent too

	alice.leave(len(alice.conns))
	bob.leave(len(bob.conns))
	ln.Close()
	srv.wg.Wait()
	if err := store.Close(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("\ndone: every connection released, store closed")
}
