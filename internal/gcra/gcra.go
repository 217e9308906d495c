// Package gcra is the arithmetic of the generic cell rate algorithm on raw
// nanoseconds, shared by driver.Shape and package pace's table of buckets so
// that both decide with exactly the same numbers.
package gcra

// Fit is the arithmetic of Take for a take of cost nanoseconds of refill
// time from a bucket of tolerance tol whose TAT is tat, at now.
func Fit(tat, now, cost, tol int64) (next, wait int64, ok bool) {
	base := max(tat, now)
	debt := base - now + cost
	if debt > tol {
		return tat, debt - tol, false
	}
	return base + cost, 0, true
}

// Refund is driver.Shape.Refund for a take of cost nanoseconds of refill time of which
// the last give (0 <= give <= cost) are given back: the part of a
// reservation of n events settled at fewer. The rules are Refund's; the
// part given back is the take's latest, the one the bucket refills last.
func Refund(tat, taken, reserved, now, shifted, cost, give int64) (next int64, full bool, reorder int64) {
	end := taken + cost // the earliest the take's refill can end
	switch {
	case shifted == 0:
		if tat < reserved && reserved > now {
			return tat, tat <= now, 0 // given back already
		}
		end = reserved
	case shifted > 0 && reserved-shifted > end:
		end = reserved - shifted
	}
	give = min(give, max(end-now, 0))
	if give == 0 {
		return tat, tat <= now, 0
	}
	if shifted != 0 || tat != reserved {
		reorder = give
	}
	next = tat - give
	if next <= now {
		return now, true, reorder
	}
	return next, false, reorder
}
