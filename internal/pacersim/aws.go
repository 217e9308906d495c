package pacersim

import (
	"math"
	"time"
)

// awsAdaptive is the client-side rate limiter of the AWS SDKs' "adaptive"
// retry mode, written from its published description: a token bucket,
// disabled until the first throttle, whose fill rate follows CUBIC
// (β = 0.7, C = 0.4) around the measured sending rate (smoothed with 0.8
// over half-second buckets), never more than twice that measured rate.
// Like every baseline here it also honours Retry-After.
type awsAdaptive struct {
	h hold

	enabled  bool
	fillRate float64 // tokens per second
	capacity float64
	tokens   float64
	lastFill float64 // seconds

	measured     float64
	txBucket     float64
	requestCount float64

	lastMaxRate  float64
	lastThrottle float64
	timeWindow   float64
}

const (
	awsBeta        = 0.7
	awsC           = 0.4
	awsSmooth      = 0.8
	awsMinFillRate = 0.5
	awsMinCapacity = 1
)

// NewAWSAdaptive returns the AWS SDK adaptive retry rate limiter.
func NewAWSAdaptive(int, uint64, Config) Policy { return &awsAdaptive{} }

func (a *awsAdaptive) refill(now float64) {
	if a.lastFill == 0 && a.tokens == 0 {
		a.lastFill = now
	}
	a.tokens = math.Min(a.capacity, a.tokens+(now-a.lastFill)*a.fillRate)
	a.lastFill = now
}

// Next acquires one token: without delay while the bucket is disabled,
// otherwise after the time the missing part takes to refill.
func (a *awsAdaptive) Next(now time.Duration) time.Duration {
	d := a.h.delay(now)
	if !a.enabled {
		return d
	}
	t := (now + d).Seconds()
	a.refill(t)
	a.tokens--
	if a.tokens < 0 {
		d += time.Duration(-a.tokens / a.fillRate * float64(time.Second))
	}
	return d
}

func (a *awsAdaptive) Observe(now time.Duration, r Response) {
	a.h.observe(now, r)
	t := now.Seconds()
	a.updateMeasured(t)
	var rate float64
	if !r.Accepted {
		use := a.measured
		if a.enabled {
			use = math.Min(a.measured, a.fillRate)
		}
		a.lastMaxRate = use
		a.timeWindow = math.Cbrt(a.lastMaxRate * (1 - awsBeta) / awsC)
		a.lastThrottle = t
		rate = use * awsBeta
		a.enabled = true
	} else {
		a.timeWindow = math.Cbrt(a.lastMaxRate * (1 - awsBeta) / awsC)
		rate = awsC*math.Pow(t-a.lastThrottle-a.timeWindow, 3) + a.lastMaxRate
	}
	rate = math.Min(rate, 2*a.measured)
	a.setRate(t, rate)
}

func (a *awsAdaptive) setRate(t, rate float64) {
	if a.enabled {
		a.refill(t)
	}
	a.fillRate = math.Max(rate, awsMinFillRate)
	a.capacity = math.Max(rate, awsMinCapacity)
	a.tokens = math.Min(a.tokens, a.capacity)
}

func (a *awsAdaptive) updateMeasured(t float64) {
	bucket := math.Floor(t*2) / 2
	a.requestCount++
	if bucket > a.txBucket {
		current := a.requestCount / (bucket - a.txBucket)
		a.measured = current*awsSmooth + a.measured*(1-awsSmooth)
		a.requestCount = 0
		a.txBucket = bucket
	}
}
