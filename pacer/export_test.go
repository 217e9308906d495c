package pacer

// Queued reports how many callers are blocked in p.Wait, for tests that
// must know a caller is queued before they move the clock.
func Queued(p *Pacer) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queue.len()
}
