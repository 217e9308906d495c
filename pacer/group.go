package pacer

import "sync"

// Group keeps one Pacer per key, for APIs that enforce several limits at
// once (GitHub's x-ratelimit-resource: core, search, graphql…). Every
// Pacer of a Group is built with the Group's options (with WithSeed, all
// of them draw the same jitter, which only matters in tests).
//
// A Group never forgets a key: keys name the API's limits, a small set
// chosen by the program, not by whoever sends requests. Do not key a Group
// by untrusted input.
//
// The zero Group is not usable; call NewGroup. A Group is safe for
// concurrent use by multiple goroutines.
type Group struct {
	cfg    config
	mu     sync.Mutex
	pacers map[string]*Pacer
}

// NewGroup returns an empty Group whose Pacers are built with opts. It
// fails as New does, with an error wrapping pace.ErrInvalidArgument, on an
// invalid option.
func NewGroup(opts ...Option) (*Group, error) {
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	return &Group{cfg: cfg, pacers: map[string]*Pacer{}}, nil
}

// Get returns the Pacer of key, creating it on first use. The same key
// always returns the same Pacer.
func (g *Group) Get(key string) *Pacer {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pacers[key]
	if !ok {
		p = newPacer(g.cfg)
		g.pacers[key] = p
	}
	return p
}

// Len reports how many keys the Group holds.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pacers)
}
