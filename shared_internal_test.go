package pace

// QueuedDecisions reports the decisions of p waiting for a round trip.
func QueuedDecisions(p *Shared) int {
	p.rt.mu.Lock()
	defer p.rt.mu.Unlock()
	return len(p.rt.queue)
}
