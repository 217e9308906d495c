// Package pacertest runs pacer clients end to end against rate-limiting
// server libraries written by others (go-chi/httprate, sethvargo/go-limiter,
// ulule/limiter, throttled/throttled) over real HTTP on 127.0.0.1, and
// measures what they reach: utilisation of what the server allows, the share
// of calls refused, Jain's index of the clients' accepted calls, and calls
// sent before a Retry-After. It is a module of its own so that the root
// module does not depend on those libraries. These are validation servers:
// the pacer is never tuned on them (docs/pacer.md).
package pacertest
