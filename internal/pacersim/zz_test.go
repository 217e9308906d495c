package pacersim

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ratepace/pace/pacer"
)

func TestZZE2E(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	for _, opts := range [][]pacer.Option{nil, {pacer.WithBurst(0)}} {
		var js []float64
		for seed := uint64(1); seed <= 8; seed++ {
			cfg := Config{Seed: seed, Clients: 4, Duration: 18 * time.Second, Window: 2 * time.Second, RTT: time.Millisecond, Limit: func(time.Duration) int { return 60 }, StartSpread: 10 * time.Millisecond}
			tr := Run(cfg, NewPacerWith(opts...))
			per := make([]float64, 4)
			for _, d := range tr.Decisions {
				if d.Accepted && d.At > 8*time.Second {
					per[d.Client]++
				}
			}
			js = append(js, Jain(per))
		}
		fmt.Printf("%v\n", js)
	}
}
