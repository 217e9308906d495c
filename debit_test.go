package pace_test

import (
	"testing"
	"time"

	"github.com/ratepace/pace"
	"github.com/ratepace/pace/internal/fakeclock"
)

// TestDebitPutsTheBucketIntoDebt: events that already happened count even
// when they no longer fit, so the key is refused until the pace has repaid
// them, and over time the key's events stay within the pace. Allow, which
// debits nothing once the bucket is empty, would let the key go on.
func TestDebitPutsTheBucketIntoDebt(t *testing.T) {
	clk := fakeclock.New(time.Unix(1e9, 0))
	p, err := pace.New(1, pace.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Debit("k") {
		t.Fatal("the first debit of a full bucket did not fit")
	}
	for i := range 4 {
		if p.Debit("k") {
			t.Fatalf("debit %d of an empty bucket reported that it fitted", i+2)
		}
	}
	// Five events at 1/s with a bucket of one: four owed, then one more
	// needs a second.
	ok, wait := p.Peek("k")
	if ok || wait != 5*time.Second {
		t.Fatalf("Peek after five debits: %v, wait %v; want refused for 5s", ok, wait)
	}
	if !p.Allow("other") {
		t.Fatal("a debt of one key refused another")
	}
	clk.Advance(5*time.Second - time.Nanosecond)
	if p.Allow("k") {
		t.Fatal("admitted before the debt was repaid")
	}
	clk.Advance(time.Nanosecond)
	if !p.Allow("k") {
		t.Fatal("refused once the debt was repaid")
	}
	if p.Allow("k") {
		t.Fatal("admitted twice in the second after the debt")
	}
}
