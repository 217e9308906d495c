package pace

// QueuedDecisions reports the decisions of p waiting for a round trip.
func QueuedDecisions(p *Shared) int {
	p.rt.mu.Lock()
	defer p.rt.mu.Unlock()
	return len(p.rt.queue)
}

// RoundTripsUnderWay reports the round trips of p in flight and the
// decisions they carry, as its round-trip accounting holds them.
func RoundTripsUnderWay(p *Shared) (inflight, carried int) {
	p.rt.mu.Lock()
	defer p.rt.mu.Unlock()
	return p.rt.inflight, p.rt.carried
}

// WaitProbes waits until no probe of p's fallback is under way.
func WaitProbes(p *Shared) {
	if p.brk != nil {
		p.brk.wait()
	}
}

// WaitFailureProbes waits until no probe of s, a Store of
// WithFailurePolicy, is under way.
func WaitFailureProbes(s Store) {
	switch f := s.(type) {
	case *failureStore:
		f.brk.wait()
	case *failureTaker:
		f.brk.wait()
	}
}
