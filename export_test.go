package pace

import (
	"time"

	"github.com/ratepace/pace/internal/table"
)

// Buckets and NewBuckets expose the table of buckets behind Pace and Shared
// to the tests of package pace_test.
type Buckets = table.Table

func NewBuckets(now func() time.Time) *Buckets { return table.New(now) }

// MaxRate is maxRate, for the tests of package pace_test.
const MaxRate = maxRate
