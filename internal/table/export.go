package table

// ShardOf reports the shard the key hashed to h belongs to, for tests that
// crowd one shard.
func (t *Table) ShardOf(h uint64) int { return int(h >> (64 - shardBits)) }

// Recount reports the live count of shard i and a recount of its rows, for
// tests: the two must agree whatever decisions, returns, sweeps and rebuilds
// raced. It takes the shard's lock.
func (t *Table) Recount(i int) (live, counted int64) {
	sh := &t.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if tab := sh.tab.Load(); tab != nil {
		for j := range tab.keys {
			if tab.keys[j].Load() != 0 && tab.tats[j].Load() > deleted {
				counted++
			}
		}
	}
	return sh.live.Load(), counted
}
