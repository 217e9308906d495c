package driver_test

import (
	"fmt"
	"time"

	"github.com/ratepace/pace/driver"
)

// Shape is the arithmetic every backend shares: pure functions of an
// arrival time and a now.
func ExampleShape() {
	b, _ := driver.NewShape(10, 5, 4) // 10 tokens, 5 per second, 4 per take
	var tat time.Duration             // zero: a full bucket at time zero
	for i := range 3 {
		next, wait, ok := b.Take(tat, 0)
		fmt.Println(i, ok, wait)
		if ok {
			tat = next
		}
	}
	// Output:
	// 0 true 0s
	// 1 true 0s
	// 2 false 400ms
}
