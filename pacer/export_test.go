package pacer

// Queued reports how many callers are blocked in p.Wait, for tests that
// must know a caller is queued before they move the clock.
func Queued(p *Pacer) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queue.len()
}

// MustNew is New for tests whose options are valid.
func MustNew(opts ...Option) *Pacer {
	p, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return p
}

// MustNewGroup is NewGroup for tests whose options are valid.
func MustNewGroup(opts ...Option) *Group {
	g, err := NewGroup(opts...)
	if err != nil {
		panic(err)
	}
	return g
}
