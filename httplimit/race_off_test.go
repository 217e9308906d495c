//go:build !race

package httplimit_test

// poolSlack is the allocations a request may add under -race, where
// sync.Pool drops a quarter of what is put back.
const poolSlack = 0
