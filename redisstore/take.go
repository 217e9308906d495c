package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/ratepace/pace/driver"
	"github.com/ratepace/pace/internal/storekit"
	"github.com/redis/go-redis/v9"
	"math"
	"time"
)

// maxBatch is the most keys one script call of TakeMany decides, so that a
// large batch does not hold the server (which runs one script at a time)
// for more than about a millisecond.
const maxBatch = 256

// Take takes one take of every shape at key, all or nothing, in one script
// call at the server's time; see pace.Store.Take. The script decides with
// the arithmetic of driver.TakeAll on the key's arrival times, to the
// nanosecond, and returns what it read, from which Take reports the Grant
// with driver.TakeAll and driver.RemainingAll. The key expires when every shape
// is full again.
func (s *Store) Take(ctx context.Context, key string, shapes []driver.Shape) (driver.Grant, error) {
	if err := s.usable(); err != nil {
		return driver.Grant{}, err
	}
	if err := driver.ValidateTake(key, shapes); err != nil {
		return driver.Grant{}, err
	}
	var out [1]driver.Grant
	if err := s.takeMany(ctx, "Take", []string{key}, shapes, out[:]); err != nil {
		return driver.Grant{}, err
	}
	return out[0], nil
}

// TakeMany is Take for several keys with the same shapes, in one round trip;
// see pace.Store.TakeMany. On a single server (a *redis.Client) one script
// call decides up to 256 keys at once; on a Cluster or a Ring the keys that
// share a hash tag go to one script call, and the calls (one per key, unless
// the prefix holds a tag of its own) are sent as one pipeline. Each key is
// decided atomically on its own, all at one reading of the clock per call.
// keys may repeat: each occurrence takes. A backend error fails the whole
// call and leaves out undefined, though some keys may have been taken.
func (s *Store) TakeMany(ctx context.Context, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := driver.ValidateTakeMany(keys, shapes, out); err != nil {
		return err
	}
	return s.takeMany(ctx, "TakeMany", keys, shapes, out)
}

// takeBatch is the keys of one script call of takeMany: their Redis keys
// and their indices in the caller's slices.
type takeBatch struct {
	keys []string
	at   []int
	cmd  *redis.Cmd
}

// takeMany runs the take script on keys, whose arguments the caller has
// validated, writing out.
func (s *Store) takeMany(ctx context.Context, op string, keys []string, shapes []driver.Shape, out []driver.Grant) error {
	if len(keys) == 0 {
		return nil
	}
	gen := storekit.NewGen()
	script, args := takeOneScript, make([]any, 0, 4+4*len(shapes))
	if len(shapes) == 1 {
		args = append(args, packOne(shapes[0], gen))
	} else {
		script = takeScript
		args = append(args, len(shapes))
		for _, b := range shapes {
			is, in := split(b.Interval())
			ts, tn := split(b.Tolerance())
			args = append(args, is, in, ts, tn)
		}
		args = append(args, gen)
	}
	args = s.withNow(args...)

	var batches []takeBatch
	if len(keys) == 1 {
		// Take, or a lone decision: one batch on any client, built in
		// place.
		one := [1]takeBatch{{keys: []string{s.keys.key(keys[0], nsTake)}, at: firstKey}}
		batches = one[:]
	} else {
		batches = s.batches(keys)
	}
	if len(batches) == 1 {
		b := &batches[0]
		b.cmd = script.Run(ctx, s.client, b.keys, args...)
	} else if err := s.pipeline(ctx, script, batches, args); err != nil {
		return failed(op, err)
	}
	for _, b := range batches {
		if err := readTakes(b, shapes, gen, out); err != nil {
			return failed(op, err)
		}
	}
	return nil
}

// firstKey is the at of a batch of the first key alone. Never written.
var firstKey = []int{0}

// packOne returns the argument of takeOneScript: b's interval and
// tolerance, each as (seconds, nanoseconds), and gen, as five little-endian
// doubles, all integers below 2^53 and so exact.
func packOne(b driver.Shape, gen uint64) string {
	is, in := split(b.Interval())
	ts, tn := split(b.Tolerance())
	var packed [40]byte
	for i, v := range [5]float64{float64(is), float64(in), float64(ts), float64(tn), float64(gen)} {
		binary.LittleEndian.PutUint64(packed[8*i:], math.Float64bits(v))
	}
	return string(packed[:])
}

// batches splits keys into script calls: on a single server, runs of up to
// maxBatch keys; on a Cluster or a Ring, the keys of each hash tag (one
// Redis node), in runs of up to maxBatch.
func (s *Store) batches(keys []string) []takeBatch {
	_, single := s.client.(*redis.Client)
	var open map[string]int // on a Cluster or a Ring: hash tag -> its batch being filled
	if !single && len(keys) > 1 {
		open = map[string]int{}
	}
	var bs []takeBatch
	for i, k := range keys {
		rk := s.keys.key(k, nsTake)
		tag := ""
		if open != nil {
			tag = hashTagOf(rk)
		}
		j, ok := open[tag]
		if open == nil {
			j, ok = len(bs)-1, len(bs) > 0
		}
		if !ok || len(bs[j].keys) == maxBatch {
			j = len(bs)
			var b takeBatch
			if open == nil { // a run of the keys left, up to maxBatch: sized at once
				n := min(len(keys)-i, maxBatch)
				b = takeBatch{keys: make([]string, 0, n), at: make([]int, 0, n)}
			}
			bs = append(bs, b)
			if open != nil {
				open[tag] = j
			}
		}
		bs[j].keys = append(bs[j].keys, rk)
		bs[j].at = append(bs[j].at, i)
	}
	return bs
}

// pipeline sends one call of script per batch with EVALSHA, in one round
// trip (per node, on a Cluster or a Ring), and sends again with EVAL, in a
// second round trip, the calls a node answered NOSCRIPT (its script cache
// was flushed or it restarted). It leaves each batch's reply in its cmd.
func (s *Store) pipeline(ctx context.Context, script *redis.Script, bs []takeBatch, args []any) error {
	pipe := s.client.Pipeline()
	for i := range bs {
		bs[i].cmd = script.EvalSha(ctx, pipe, bs[i].keys, args...)
	}
	if _, err := pipe.Exec(ctx); err == nil {
		return nil
	}
	pipe = s.client.Pipeline()
	again := 0
	for i := range bs {
		if err := bs[i].cmd.Err(); redis.HasErrorPrefix(err, "NOSCRIPT") {
			bs[i].cmd = script.Eval(ctx, pipe, bs[i].keys, args...)
			again++
		}
	}
	if again > 0 {
		_, _ = pipe.Exec(ctx) // each cmd keeps its own error, read by the caller
	}
	return nil
}

// readTakes turns the reply of one call of takeScript or takeOneScript,
// given gen as the count of a key it creates, into grants.
func readTakes(b takeBatch, shapes []driver.Shape, gen uint64, out []driver.Grant) error {
	if len(shapes) == 1 {
		packed, err := b.cmd.Text()
		if err != nil {
			return err
		}
		var buf [6]int64 // the reply of one key, without allocating
		res, err := unpackDoubles(packed, buf[:0])
		if err != nil {
			return err
		}
		return readTakesOne(res, b, shapes, gen, out)
	}
	res, err := b.cmd.Int64Slice()
	if err != nil {
		return err
	}
	n := len(shapes)
	if len(res) != 2+len(b.keys)*(2+2*n) {
		return fmt.Errorf("redisstore: take script returned %d numbers for %d keys", len(res), len(b.keys))
	}
	now := time.Duration(res[0])*time.Second + time.Duration(res[1])
	var tats [driver.MaxShapes]time.Duration
	for j, i := range b.at {
		r := res[2+j*(2+2*n):]
		for k := range n {
			tats[k] = time.Duration(r[2+2*k])*time.Second + time.Duration(r[3+2*k])
		}
		g, err := storekit.Grant(shapes, tats[:n], now, uint64(r[1]), r[0] == 1)
		if err != nil {
			return err
		}
		out[i] = g
	}
	return nil
}

// unpackDoubles appends to dst the numbers of a reply packed as
// little-endian doubles, each of which must be an integer that an int64
// holds, and returns it.
func unpackDoubles(packed string, dst []int64) ([]int64, error) {
	if len(packed)%8 != 0 {
		return nil, fmt.Errorf("redisstore: take script returned %d bytes, not a whole number of doubles", len(packed))
	}
	for i := 0; i < len(packed); i += 8 {
		v := math.Float64frombits(binary.LittleEndian.Uint64([]byte(packed[i : i+8])))
		if v != math.Trunc(v) || math.Abs(v) >= 1<<63 {
			return nil, fmt.Errorf("redisstore: take script returned %g, not an integer", v)
		}
		dst = append(dst, int64(v))
	}
	return dst, nil
}

// readTakesOne is readTakes for takeOneScript's reply, unpacked: one number
// per fresh key, four per live one.
func readTakesOne(res []int64, b takeBatch, shapes []driver.Shape, gen uint64, out []driver.Grant) error {
	malformed := func() error {
		return fmt.Errorf("redisstore: take script returned %d numbers for %d keys", len(res), len(b.keys))
	}
	if len(res) < 2 {
		return malformed()
	}
	now := time.Duration(res[0])*time.Second + time.Duration(res[1])
	r := res[2:]
	for _, i := range b.at {
		var (
			g   driver.Grant
			err error
		)
		switch {
		case len(r) >= 1 && (r[0] == 0 || r[0] == 1):
			g, err = storekit.Grant(shapes, []time.Duration{now}, now, gen, r[0] == 1)
			r = r[1:]
		case len(r) >= 4 && (r[0] == 2 || r[0] == 3):
			tat := time.Duration(r[2])*time.Second + time.Duration(r[3])
			g, err = storekit.Grant(shapes, []time.Duration{tat}, now, uint64(r[1]), r[0] == 3)
			r = r[4:]
		default:
			return malformed()
		}
		if err != nil {
			return err
		}
		out[i] = g
	}
	if len(r) != 0 {
		return malformed()
	}
	return nil
}

// Refund gives back the take that r describes, in one script call at the
// server's time; see pace.Store.Refund. The script is driver.RefundAll on the
// key's arrival times, exact while the key's reorder count still equals
// r.Gen; a refund that reorders raises the count and is remembered, so that
// refunding the same receipt again gives nothing. The zero Receipt, an
// absent key, a full one, and a receipt taken before the key was last
// absent (full or deleted) are left alone; a key that the refund leaves full
// is deleted.
func (s *Store) Refund(ctx context.Context, key string, shapes []driver.Shape, r driver.Receipt) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := driver.ValidateTake(key, shapes); err != nil {
		return err
	}
	if r == (driver.Receipt{}) {
		return nil
	}
	as, an := split(r.At)
	args := make([]any, 0, 6+4*len(shapes))
	args = append(args, len(shapes), as, an, r.Gen)
	for i, b := range shapes {
		is, in := split(b.Interval())
		rs, rn := split(r.Reserved[i])
		args = append(args, is, in, rs, rn)
	}
	if err := refundScript.Run(ctx, s.client, []string{s.keys.key(key, nsTake)}, s.withNow(args...)...).Err(); err != nil {
		return failed("Refund", err)
	}
	return nil
}
