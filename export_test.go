package pace

import "time"

// Buckets and NewBuckets expose the table of buckets behind Pace and Shared
// to the tests of package pace_test.
type Buckets = buckets

func NewBuckets(now func() time.Time) *Buckets { return newBuckets(now) }

// MaxRate is maxRate, for the tests of package pace_test.
const MaxRate = maxRate
