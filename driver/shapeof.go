package driver

import "time"

// ShapeOf returns the shape of the generic cell rate algorithm's own
// parameters: interval, the refill time of one take (its emission
// interval), and tolerance, the most debt a take may leave (the capacity in
// time). tolerance is clamped to [1ns, MaxTolerance] and interval to
// [0, tolerance], so the result is always a valid Shape. It is for shapes
// that are not a capacity and a rate: a debt of a whole refill (a take that
// must be counted whether or not it fits), or a refusal remembered for a
// given time.
func ShapeOf(interval, tolerance time.Duration) Shape {
	tolerance = min(max(tolerance, 1), MaxTolerance)
	return Shape{interval: min(max(interval, 0), tolerance), tolerance: tolerance}
}
