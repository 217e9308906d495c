-- Schema of pgstore. New runs this file, followed by sweep.sql once for
-- each table, in one transaction under an advisory lock, whenever the
-- schema's recorded version differs from schemaVersion. Every value New
-- writes in stands as a placeholder, a name between two at signs, the one
-- scheme of all the SQL pgstore runs (see placeholders in pgstore.go): the
-- quoted schema name, UNLOGGED or nothing, the version, and
-- pace.BurstRefillWindow in nanoseconds, so the SQL holds no constant of
-- its own. Every empty dollar-quote delimiter becomes a tagged one that does
-- not occur in the quoted name. The placeholders stand only in code, never
-- in a comment or a string literal (a test checks this), so a name,
-- whatever its characters, is never anything but one quoted identifier.
--
-- Conventions:
--   * keys are the SHA-256 digest of the caller's key (32 bytes), so every
--     key up to pace.MaxKeyLen fits a B-tree entry and need not be UTF-8;
--   * times and durations are bigint nanoseconds since the Unix epoch; the
--     database clock has microsecond resolution, so a clock reading is a
--     multiple of 1000 ns, while arithmetic (bucket intervals, burst drains)
--     is exact to the nanosecond;
--   * every function takes p_now: NULL in production, where the time is read
--     from clock_timestamp() after the row lock is held; tests pass an
--     explicit instant to compare the SQL with the Go reference arithmetic;
--   * a row whose reclaim time has passed is treated as absent, so it makes
--     no difference whether the sweep has deleted it yet;
--   * the sweep finds dead rows through an index on sweep_at, a coarse upper
--     bound of the reclaim time that moves only when the reclaim time passes
--     it (see sweep_after), so most updates change no indexed column: they
--     are HOT updates, which add no index entries and leave none dead for the
--     sweep to step over. fillfactor leaves room on each page for them.

CREATE SCHEMA IF NOT EXISTS @schema@;

CREATE TABLE IF NOT EXISTS @schema@.meta (version integer NOT NULL);

-- Token buckets: the GCRA theoretical arrival time. tat <= now is a full
-- bucket, the same state as an absent row.
CREATE @unlogged@ TABLE IF NOT EXISTS @schema@.buckets (
	key bytea PRIMARY KEY,
	tat bigint NOT NULL,
	sweep_at bigint NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX IF NOT EXISTS buckets_sweep_at ON @schema@.buckets (sweep_at);

-- Plain slot counters (AcquireSlot). expires <= now is an absent counter.
CREATE @unlogged@ TABLE IF NOT EXISTS @schema@.slots (
	key bytea PRIMARY KEY,
	live bigint NOT NULL,
	expires bigint NOT NULL,
	sweep_at bigint NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX IF NOT EXISTS slots_sweep_at ON @schema@.slots (sweep_at);

-- Burst slots: pace.BurstSlotState, plus reclaim = ReclaimAt().
CREATE @unlogged@ TABLE IF NOT EXISTS @schema@.bursts (
	key bytea PRIMARY KEY,
	live bigint NOT NULL,
	remaining bigint NOT NULL,
	assessed bigint NOT NULL,
	expires bigint NOT NULL,
	sustained bigint NOT NULL,
	budget bigint NOT NULL,
	reclaim bigint NOT NULL,
	sweep_at bigint NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX IF NOT EXISTS bursts_sweep_at ON @schema@.bursts (sweep_at);

-- Memoised values. expires IS NULL never expires.
CREATE @unlogged@ TABLE IF NOT EXISTS @schema@.vals (
	key bytea PRIMARY KEY,
	value bytea NOT NULL,
	expires bigint
);
CREATE INDEX IF NOT EXISTS vals_expires ON @schema@.vals (expires) WHERE expires IS NOT NULL;

-- Keys of Take: an arrival time per shape, by position (tats), the reorder
-- count gen and what it was when the key was created (born), and the
-- receipt of the latest refund that reordered (memo_at, memo_reserved,
-- memo_gen; zero for none). A row whose arrival times are all not after now
-- is full, the same state as an absent row; its reclaim time is the latest
-- arrival time.
CREATE @unlogged@ TABLE IF NOT EXISTS @schema@.takes (
	key bytea PRIMARY KEY,
	tats bigint[] NOT NULL,
	gen bigint NOT NULL,
	born bigint NOT NULL,
	memo_at bigint NOT NULL,
	memo_reserved bigint NOT NULL,
	memo_gen bigint NOT NULL,
	sweep_at bigint NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX IF NOT EXISTS takes_sweep_at ON @schema@.takes (sweep_at);

-- now_ns reads the database clock in nanoseconds since the Unix epoch.
-- clock_timestamp(), not statement_timestamp(): the callers read it after
-- taking the row lock, so a call that waited behind another on the same key
-- never decides with an instant earlier than the one the other wrote.
CREATE OR REPLACE FUNCTION @schema@.now_ns() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
	SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint * 1000
$$;

-- sat_add returns a + b (b >= 0), saturated at the largest bigint (year 2262).
CREATE OR REPLACE FUNCTION @schema@.sat_add(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN a > 9223372036854775807 - b THEN 9223372036854775807 ELSE a + b END
$$;

-- sweep_after returns a row's new sweep_at for reclaim time r written at
-- now, given its current sweep_at cur (NULL for a new row): cur while it is
-- still at or after r, otherwise r plus half the time from now to r. A key in
-- steady use therefore moves its sweep_at (an index update) a logarithmic
-- number of times, and a row is swept at most half its horizon late.
CREATE OR REPLACE FUNCTION @schema@.sweep_after(r bigint, now bigint, cur bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN cur >= r THEN cur ELSE @schema@.sat_add(r, greatest(r - now, 0) / 2) END
$$;

-- mul_div is pace's mulDiv: floor(a × b / c) in IEEE double precision, the
-- same operations in the same order, saturated to the bigint range.
CREATE OR REPLACE FUNCTION @schema@.mul_div(a bigint, b bigint, c bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN q >= 9223372036854775807::float8 THEN 9223372036854775807 ELSE q::bigint END
	FROM (SELECT floor(a::float8 * b::float8 / c::float8) AS q) AS m
$$;

-- burst_charge is pace.chargeBurst: account for the time from st.assessed
-- to t at st.live. The window is pace.BurstRefillWindow, in nanoseconds,
-- written in by New.
CREATE OR REPLACE FUNCTION @schema@.burst_charge(st @schema@.bursts, t bigint) RETURNS @schema@.bursts
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	v_elapsed bigint := t - st.assessed;
	v_refill bigint;
BEGIN
	IF v_elapsed <= 0 THEN
		RETURN st;
	END IF;
	st.assessed := t;
	IF st.live > st.sustained AND st.sustained > 0 THEN
		st.remaining := greatest(st.remaining - @schema@.mul_div(v_elapsed, st.live - st.sustained, st.sustained), 0);
		RETURN st;
	END IF;
	v_refill := @schema@.mul_div(v_elapsed, st.budget, @refill_window@);
	IF v_refill >= st.budget - st.remaining THEN
		st.remaining := st.budget;
	ELSE
		st.remaining := st.remaining + v_refill;
	END IF;
	RETURN st;
END
$$;

-- burst_assess is the assessment every pace burst function starts with
-- (assessBurst in burst.go), on a present slot.
CREATE OR REPLACE FUNCTION @schema@.burst_assess(st @schema@.bursts, p_now bigint) RETURNS @schema@.bursts
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF st.live > 0 AND p_now >= st.expires THEN
		st := @schema@.burst_charge(st, st.expires);
		st.live := 0;
	END IF;
	RETURN @schema@.burst_charge(st, p_now);
END
$$;

-- burst_reclaim is pace.(*BurstSlotState).ReclaimAt: the last activity or
-- the expiry, whichever is later, plus two refill windows when the budget
-- has a deficit or the slot is above sustained.
CREATE OR REPLACE FUNCTION @schema@.burst_reclaim(st @schema@.bursts) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN st.remaining < st.budget OR st.live > st.sustained
		THEN @schema@.sat_add(at, 2 * @refill_window@) ELSE at END
	FROM (SELECT CASE WHEN st.live > 0 AND st.expires > st.assessed THEN st.expires ELSE st.assessed END AS at) AS a
$$;

-- take_debt is the debt of pace.Bucket.Take: the arrival time one take of
-- interval p_interval sets, on a bucket whose arrival time is tat (NULL for
-- an absent row, a full bucket), less p_now. The take fits when the debt is
-- at most the shape's tolerance. An SQL function of one expression, so the
-- planner inlines it: a call costs what the expression written out costs.
CREATE OR REPLACE FUNCTION @schema@.take_debt(tat bigint, p_now bigint, p_interval bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
	SELECT greatest(tat, p_now) - p_now + p_interval
$$;

-- keep_bucket writes the bucket r, as decided at p_now, to buckets: it
-- deletes the row when the bucket is full (the same state as an absent
-- row), and otherwise updates it (p_found, r.sweep_at the row's) or inserts
-- it and sweeps p_sweep reclaimable rows. It returns false when another
-- caller inserted the key since the caller's SELECT (the caller decides
-- again on that row), true otherwise.
CREATE OR REPLACE FUNCTION @schema@.keep_bucket(r @schema@.buckets, p_found boolean, p_now bigint, p_sweep integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
	IF r.tat <= p_now THEN
		IF p_found THEN
			DELETE FROM @schema@.buckets b WHERE b.key = r.key;
		END IF;
		RETURN true;
	END IF;
	r.sweep_at := @schema@.sweep_after(r.tat, p_now, r.sweep_at);
	IF p_found THEN
		UPDATE @schema@.buckets b SET tat = r.tat, sweep_at = r.sweep_at WHERE b.key = r.key;
		RETURN true;
	END IF;
	INSERT INTO @schema@.buckets (key, tat, sweep_at) VALUES (r.key, r.tat, r.sweep_at)
	ON CONFLICT (key) DO NOTHING;
	IF FOUND AND p_sweep > 0 THEN
		PERFORM @schema@.sweep_buckets(p_sweep, p_now);
	END IF;
	RETURN FOUND;
END
$$;

-- take is one GCRA step (pace.Bucket.Take) with the shape computed in Go.
-- A refusal writes nothing; wait is the time until the same take fits.
CREATE OR REPLACE FUNCTION @schema@.take(p_key bytea, p_interval bigint, p_tolerance bigint, p_now bigint, p_sweep integer,
	OUT allowed boolean, OUT wait bigint)
LANGUAGE plpgsql AS $$
DECLARE
	r @schema@.buckets;
	v_found boolean;
	v_now bigint;
	v_debt bigint;
BEGIN
	LOOP
		SELECT * INTO r FROM @schema@.buckets b WHERE b.key = p_key FOR UPDATE;
		v_found := FOUND;
		v_now := coalesce(p_now, @schema@.now_ns());
		v_debt := @schema@.take_debt(r.tat, v_now, p_interval);
		IF v_debt > p_tolerance THEN
			allowed := false;
			wait := v_debt - p_tolerance;
			RETURN;
		END IF;
		allowed := true;
		wait := 0;
		r := ROW(p_key, v_now + v_debt, r.sweep_at);
		EXIT WHEN @schema@.keep_bucket(r, v_found, v_now, p_sweep);
		-- Another caller inserted the key since our SELECT: decide again on its row.
	END LOOP;
END
$$;

-- keep_slot writes the slot counter r, as decided at p_now, to slots: it
-- deletes the row when the counter is expired or holds no slot (the same
-- state as an absent row), and otherwise updates it (p_found, r.sweep_at
-- the row's) or inserts it and sweeps p_sweep reclaimable rows. It returns
-- false when another caller inserted the key since the caller's SELECT (the
-- caller decides again on that row), true otherwise.
CREATE OR REPLACE FUNCTION @schema@.keep_slot(r @schema@.slots, p_found boolean, p_now bigint, p_sweep integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
	IF r.expires <= p_now OR r.live <= 0 THEN
		IF p_found THEN
			DELETE FROM @schema@.slots s WHERE s.key = r.key;
		END IF;
		RETURN true;
	END IF;
	r.sweep_at := @schema@.sweep_after(r.expires, p_now, r.sweep_at);
	IF p_found THEN
		UPDATE @schema@.slots s SET live = r.live, expires = r.expires, sweep_at = r.sweep_at WHERE s.key = r.key;
		RETURN true;
	END IF;
	INSERT INTO @schema@.slots (key, live, expires, sweep_at) VALUES (r.key, r.live, r.expires, r.sweep_at)
	ON CONFLICT (key) DO NOTHING;
	IF FOUND AND p_sweep > 0 THEN
		PERFORM @schema@.sweep_slots(p_sweep, p_now);
	END IF;
	RETURN FOUND;
END
$$;

-- acquire_slot is Store.AcquireSlot.
CREATE OR REPLACE FUNCTION @schema@.acquire_slot(p_key bytea, p_limit bigint, p_ttl bigint, p_now bigint, p_sweep integer,
	OUT acquired boolean, OUT current bigint)
LANGUAGE plpgsql AS $$
DECLARE
	r @schema@.slots;
	v_found boolean;
	v_now bigint;
BEGIN
	LOOP
		SELECT * INTO r FROM @schema@.slots s WHERE s.key = p_key FOR UPDATE;
		v_found := FOUND;
		v_now := coalesce(p_now, @schema@.now_ns());
		IF NOT v_found OR r.expires <= v_now THEN
			r := ROW(p_key, 0, v_now, r.sweep_at);
		END IF;
		IF r.live >= p_limit THEN
			acquired := false;
			current := r.live;
			RETURN;
		END IF;
		acquired := true;
		current := r.live + 1;
		r := ROW(p_key, current, @schema@.sat_add(v_now, p_ttl), r.sweep_at);
		EXIT WHEN @schema@.keep_slot(r, v_found, v_now, p_sweep);
		-- Another caller inserted the key since our SELECT: decide again on its row.
	END LOOP;
END
$$;

-- settle_slot is Store.ReleaseSlot (p_ttl NULL: the last holder's release
-- deletes the row) or Store.RefreshSlot (p_ttl the new TTL: it extends a
-- live counter and never creates one).
CREATE OR REPLACE FUNCTION @schema@.settle_slot(p_key bytea, p_ttl bigint, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	r @schema@.slots;
	v_now bigint;
BEGIN
	SELECT * INTO r FROM @schema@.slots s WHERE s.key = p_key FOR UPDATE;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	v_now := coalesce(p_now, @schema@.now_ns());
	IF r.expires > v_now AND p_ttl IS NULL THEN
		r.live := r.live - 1;
	ELSIF r.expires > v_now THEN
		r.expires := @schema@.sat_add(v_now, p_ttl);
	END IF;
	PERFORM @schema@.keep_slot(r, true, v_now, 0);
END
$$;

-- keep_burst writes the burst slot st, as decided at p_now, to bursts: it
-- sets st's reclaim time (burst_reclaim) and sweep_at, deletes the row when
-- the slot is reclaimable already (the same state as an absent row), and
-- otherwise updates it (p_found, st.sweep_at the row's) or inserts it and
-- sweeps p_sweep reclaimable rows. It returns false when another caller
-- inserted the key since the caller's SELECT (the caller decides again on
-- that row), true otherwise.
CREATE OR REPLACE FUNCTION @schema@.keep_burst(st @schema@.bursts, p_found boolean, p_now bigint, p_sweep integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
	st.reclaim := @schema@.burst_reclaim(st);
	IF st.reclaim <= p_now THEN
		IF p_found THEN
			DELETE FROM @schema@.bursts b WHERE b.key = st.key;
		END IF;
		RETURN true;
	END IF;
	st.sweep_at := @schema@.sweep_after(st.reclaim, p_now, st.sweep_at);
	IF p_found THEN
		UPDATE @schema@.bursts b SET live = st.live, remaining = st.remaining, assessed = st.assessed,
			expires = st.expires, sustained = st.sustained, budget = st.budget, reclaim = st.reclaim,
			sweep_at = st.sweep_at
		WHERE b.key = st.key;
		RETURN true;
	END IF;
	INSERT INTO @schema@.bursts (key, live, remaining, assessed, expires, sustained, budget, reclaim, sweep_at)
	VALUES (st.key, st.live, st.remaining, st.assessed, st.expires, st.sustained, st.budget, st.reclaim, st.sweep_at)
	ON CONFLICT (key) DO NOTHING;
	IF FOUND AND p_sweep > 0 THEN
		PERFORM @schema@.sweep_bursts(p_sweep, p_now);
	END IF;
	RETURN FOUND;
END
$$;

-- acquire_burst is pace.AdmitBurst on the slot at p_key.
CREATE OR REPLACE FUNCTION @schema@.acquire_burst(p_key bytea, p_sustained bigint, p_ceiling bigint, p_budget bigint, p_ttl bigint,
	p_now bigint, p_sweep integer, OUT acquired boolean, OUT current bigint)
LANGUAGE plpgsql AS $$
DECLARE
	st @schema@.bursts;
	v_row boolean;
	v_now bigint;
BEGIN
	LOOP
		SELECT * INTO st FROM @schema@.bursts b WHERE b.key = p_key FOR UPDATE;
		v_row := FOUND;
		v_now := coalesce(p_now, @schema@.now_ns());
		IF NOT v_row OR st.reclaim <= v_now THEN
			st := ROW(p_key, 0, p_budget, v_now, 0, 0, 0, 0, st.sweep_at);
		ELSE
			st := @schema@.burst_assess(st, v_now);
		END IF;
		st.sustained := p_sustained;
		st.budget := p_budget;
		st.remaining := least(st.remaining, p_budget);
		IF st.live >= p_ceiling OR (st.live >= p_sustained AND st.remaining <= 0) THEN
			acquired := false;
		ELSE
			acquired := true;
			st.live := st.live + 1;
			st.expires := @schema@.sat_add(v_now, p_ttl);
		END IF;
		current := st.live;
		EXIT WHEN @schema@.keep_burst(st, v_row, v_now, p_sweep);
		-- Another caller inserted the key since our SELECT: decide again on its row.
	END LOOP;
END
$$;

-- settle_burst is pace.ReleaseBurst (p_ttl NULL) or pace.RefreshBurst
-- (p_ttl the new TTL) on a present slot; a no-op on an absent one, so a
-- stray release or heartbeat never resurrects a reaped slot.
CREATE OR REPLACE FUNCTION @schema@.settle_burst(p_key bytea, p_ttl bigint, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	st @schema@.bursts;
	v_now bigint;
BEGIN
	SELECT * INTO st FROM @schema@.bursts b WHERE b.key = p_key FOR UPDATE;
	IF NOT FOUND THEN
		RETURN;
	END IF;
	v_now := coalesce(p_now, @schema@.now_ns());
	IF st.reclaim > v_now THEN
		st := @schema@.burst_assess(st, v_now);
		IF st.live > 0 AND p_ttl IS NULL THEN
			st.live := st.live - 1;
		ELSIF st.live > 0 THEN
			st.expires := @schema@.sat_add(v_now, p_ttl);
		END IF;
	END IF;
	PERFORM @schema@.keep_burst(st, true, v_now, 0);
END
$$;

-- set_value is Store.Set; p_ttl = 0 never expires.
CREATE OR REPLACE FUNCTION @schema@.set_value(p_key bytea, p_value bytea, p_ttl bigint, p_now bigint, p_sweep integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	v_now bigint := coalesce(p_now, @schema@.now_ns());
	v_expires bigint := CASE WHEN p_ttl = 0 THEN NULL ELSE @schema@.sat_add(v_now, p_ttl) END;
BEGIN
	UPDATE @schema@.vals v SET value = p_value, expires = v_expires WHERE v.key = p_key;
	IF FOUND THEN
		RETURN;
	END IF;
	INSERT INTO @schema@.vals (key, value, expires) VALUES (p_key, p_value, v_expires)
	ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires;
	IF p_sweep > 0 THEN
		PERFORM @schema@.sweep_vals(p_sweep, v_now);
	END IF;
END
$$;

-- delete_key is Store.Delete: the key in all five namespaces.
CREATE OR REPLACE FUNCTION @schema@.delete_key(p_key bytea) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM @schema@.buckets b WHERE b.key = p_key;
	DELETE FROM @schema@.slots s WHERE s.key = p_key;
	DELETE FROM @schema@.bursts b WHERE b.key = p_key;
	DELETE FROM @schema@.vals v WHERE v.key = p_key;
	DELETE FROM @schema@.takes t WHERE t.key = p_key;
END
$$;

-- sweep deletes up to p_limit reclaimable rows from each table and returns
-- how many it deleted. Rows locked by running operations are skipped.
CREATE OR REPLACE FUNCTION @schema@.sweep(p_limit integer, p_now bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	v_now bigint := coalesce(p_now, @schema@.now_ns());
BEGIN
	RETURN @schema@.sweep_buckets(p_limit, v_now) + @schema@.sweep_slots(p_limit, v_now)
		+ @schema@.sweep_bursts(p_limit, v_now) + @schema@.sweep_vals(p_limit, v_now)
		+ @schema@.sweep_takes(p_limit, v_now);
END
$$;

-- last_tat returns the latest of the arrival times tats, or p_now when it
-- is later or there are none: a key is full at p_now exactly when its
-- last_tat is not after p_now.
CREATE OR REPLACE FUNCTION @schema@.last_tat(tats bigint[], p_now bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
	SELECT greatest(max(t), p_now) FROM unnest(tats) AS t
$$;

-- pad returns tats with p_now (a full shape) appended up to p_n arrival
-- times: a shape a key holds none for is full.
CREATE OR REPLACE FUNCTION @schema@.pad(tats bigint[], p_n integer, p_now bigint) RETURNS bigint[]
LANGUAGE sql IMMUTABLE AS $$
	SELECT tats || array_fill(p_now, ARRAY[greatest(p_n - cardinality(tats), 0)])
$$;

-- keep_take writes the key's row r, as decided at p_now, to takes: it
-- deletes the row when every shape is full (the same state as an absent
-- row), and otherwise updates it (p_found, r.sweep_at the row's) or inserts
-- it and sweeps p_sweep reclaimable rows. It returns false when another
-- caller inserted the key since the caller's SELECT (the caller decides
-- again on that row), true otherwise.
CREATE OR REPLACE FUNCTION @schema@.keep_take(r @schema@.takes, p_found boolean, p_now bigint, p_sweep integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	v_last bigint := @schema@.last_tat(r.tats, p_now);
BEGIN
	IF v_last <= p_now THEN
		IF p_found THEN
			DELETE FROM @schema@.takes t WHERE t.key = r.key;
		END IF;
		RETURN true;
	END IF;
	r.sweep_at := @schema@.sweep_after(v_last, p_now, r.sweep_at);
	IF p_found THEN
		UPDATE @schema@.takes t SET tats = r.tats, gen = r.gen, born = r.born, memo_at = r.memo_at,
			memo_reserved = r.memo_reserved, memo_gen = r.memo_gen, sweep_at = r.sweep_at
		WHERE t.key = r.key;
		RETURN true;
	END IF;
	INSERT INTO @schema@.takes (key, tats, gen, born, memo_at, memo_reserved, memo_gen, sweep_at)
	VALUES (r.key, r.tats, r.gen, r.born, r.memo_at, r.memo_reserved, r.memo_gen, r.sweep_at)
	ON CONFLICT (key) DO NOTHING;
	IF FOUND AND p_sweep > 0 THEN
		PERFORM @schema@.sweep_takes(p_sweep, p_now);
	END IF;
	RETURN FOUND;
END
$$;

-- take_all is pace.TakeAll on the key's arrival times, one take of every
-- shape (p_intervals[i], p_tolerances[i], computed in Go) or none, at the
-- database clock. A key that is absent or full starts a new life with the
-- reorder count p_gen. A refusal writes nothing. It returns whether it
-- took, the clock, the key's count and its arrival times before the
-- decision (one per shape), from which Go derives the grant with the same
-- arithmetic. Shapes past the given ones keep their arrival times.
-- p_sweep reclaimable rows are swept when the take inserts a row.
CREATE OR REPLACE FUNCTION @schema@.take_all(p_key bytea, p_intervals bigint[], p_tolerances bigint[], p_gen bigint,
	p_now bigint, p_sweep integer, OUT r_taken boolean, OUT r_now bigint, OUT r_gen bigint, OUT r_tats bigint[])
LANGUAGE plpgsql AS $$
DECLARE
	v_n integer := cardinality(p_intervals);
	v_row @schema@.takes;
	v_found boolean;
	v_next bigint[];
	v_debt bigint;
BEGIN
	LOOP
		SELECT * INTO v_row FROM @schema@.takes t WHERE t.key = p_key FOR UPDATE;
		v_found := FOUND;
		r_now := coalesce(p_now, @schema@.now_ns());
		IF NOT v_found OR @schema@.last_tat(v_row.tats, r_now) <= r_now THEN
			v_row := ROW(p_key, '{}'::bigint[], p_gen, p_gen, 0, 0, 0, NULL);
		END IF;
		r_gen := v_row.gen;
		r_tats := @schema@.pad(v_row.tats[1:v_n], v_n, r_now);
		r_taken := true;
		v_next := @schema@.pad(v_row.tats, v_n, r_now);
		FOR i IN 1..v_n LOOP
			v_debt := @schema@.take_debt(r_tats[i], r_now, p_intervals[i]);
			IF v_debt > p_tolerances[i] THEN
				r_taken := false;
				RETURN;
			END IF;
			v_next[i] := r_now + v_debt;
		END LOOP;
		v_row.tats := v_next;
		EXIT WHEN @schema@.keep_take(v_row, v_found, r_now, p_sweep);
		-- Another caller inserted the key since our SELECT: decide again on its row.
	END LOOP;
END
$$;

-- take_many is take_all on every key of p_keys with the same shapes, in one
-- call, returning a row per key with its position in p_keys (from 1). The
-- keys are locked in the order of their bytes, so that calls over
-- overlapping keys never wait for each other in a cycle; a key given twice
-- is taken twice, in order. The sweep runs once, after every key is held,
-- so that it never waits either.
CREATE OR REPLACE FUNCTION @schema@.take_many(p_keys bytea[], p_intervals bigint[], p_tolerances bigint[], p_gen bigint,
	p_now bigint, p_sweep integer)
RETURNS TABLE (r_ord integer, r_taken boolean, r_now bigint, r_gen bigint, r_tats bigint[])
LANGUAGE plpgsql AS $$
BEGIN
	FOR r_ord IN SELECT k.ord FROM unnest(p_keys) WITH ORDINALITY AS k(key, ord) ORDER BY k.key, k.ord LOOP
		SELECT t.r_taken, t.r_now, t.r_gen, t.r_tats INTO r_taken, r_now, r_gen, r_tats
		FROM @schema@.take_all(p_keys[r_ord], p_intervals, p_tolerances, p_gen, p_now, 0) AS t;
		RETURN NEXT;
	END LOOP;
	IF p_sweep > 0 AND r_now IS NOT NULL THEN
		PERFORM @schema@.sweep_takes(p_sweep * cardinality(p_keys), r_now);
	END IF;
END
$$;

-- refund_all is pace.RefundAll of the receipt (p_at, p_gen, p_reserved) on
-- the key's arrival times, at the database clock, with the rules of
-- pace.Buckets: the refund is intact while the key's count equals p_gen; one
-- that reorders raises the count and is remembered, and a second refund of
-- the remembered receipt gives nothing. An absent or full key, and a
-- receipt from before the key's present life (p_gen outside [born, gen]),
-- are left alone; a refund that leaves every shape full deletes the row. It
-- returns whether anything was given back.
CREATE OR REPLACE FUNCTION @schema@.refund_all(p_key bytea, p_intervals bigint[], p_at bigint, p_gen bigint,
	p_reserved bigint[], p_now bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	v_n integer := cardinality(p_intervals);
	v_row @schema@.takes;
	v_now bigint;
	v_intact boolean;
	v_tat bigint;
	v_end bigint;
	v_give bigint;
	v_gave boolean := false;
	v_reordered boolean := false;
BEGIN
	SELECT * INTO v_row FROM @schema@.takes t WHERE t.key = p_key FOR UPDATE;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	v_now := coalesce(p_now, @schema@.now_ns());
	IF @schema@.last_tat(v_row.tats, v_now) <= v_now OR p_gen < v_row.born OR p_gen > v_row.gen THEN
		RETURN false; -- full (absent), or taken before the key was last absent
	END IF;
	v_intact := v_row.gen = p_gen;
	IF NOT v_intact AND v_row.memo_at = p_at AND v_row.memo_reserved = p_reserved[1] AND v_row.memo_gen = p_gen THEN
		RETURN false; -- given back already, through a copy of the receipt
	END IF;
	v_row.tats := @schema@.pad(v_row.tats, v_n, v_now);
	FOR i IN 1..v_n LOOP
		-- pace.Bucket.Refund
		v_tat := v_row.tats[i];
		v_end := p_at + p_intervals[i];
		IF v_intact THEN
			CONTINUE WHEN v_tat < p_reserved[i] AND p_reserved[i] > v_now; -- given back already
			v_end := p_reserved[i];
		END IF;
		v_give := least(p_intervals[i], greatest(v_end - v_now, 0));
		CONTINUE WHEN v_give = 0;
		v_gave := true;
		v_reordered := v_reordered OR NOT v_intact OR v_tat <> p_reserved[i];
		v_row.tats[i] := greatest(v_tat - v_give, v_now);
	END LOOP;
	IF NOT v_gave THEN
		RETURN false;
	END IF;
	IF v_reordered THEN
		v_row.gen := v_row.gen + 1;
		v_row.memo_at := p_at;
		v_row.memo_reserved := p_reserved[1];
		v_row.memo_gen := p_gen;
	END IF;
	PERFORM @schema@.keep_take(v_row, true, v_now, 0);
	RETURN true;
END
$$;

-- Version 3's release and refresh functions, kept as the settle functions
-- under their old names, so that processes of version 3 still running
-- during a rolling upgrade keep releasing and refreshing their slots.
CREATE OR REPLACE FUNCTION @schema@.release_slot(p_key bytea, p_now bigint) RETURNS void
LANGUAGE sql AS $$ SELECT @schema@.settle_slot(p_key, NULL, p_now) $$;

CREATE OR REPLACE FUNCTION @schema@.refresh_slot(p_key bytea, p_ttl bigint, p_now bigint) RETURNS void
LANGUAGE sql AS $$ SELECT @schema@.settle_slot(p_key, p_ttl, p_now) $$;

CREATE OR REPLACE FUNCTION @schema@.release_burst(p_key bytea, p_now bigint) RETURNS void
LANGUAGE sql AS $$ SELECT @schema@.settle_burst(p_key, NULL, p_now) $$;

CREATE OR REPLACE FUNCTION @schema@.refresh_burst(p_key bytea, p_ttl bigint, p_now bigint) RETURNS void
LANGUAGE sql AS $$ SELECT @schema@.settle_burst(p_key, p_ttl, p_now) $$;

DELETE FROM @schema@.meta;
INSERT INTO @schema@.meta (version) VALUES (@version@);

