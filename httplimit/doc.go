// Package httplimit is net/http middleware for pace: keys a client cannot
// forge, several limits applied all or nothing, reservations given back
// when the handler rejects the presentation, and the IETF RateLimit-Policy
// and RateLimit response fields.
//
// A Middleware applies a list of Limits (a Pace, a token Bucket in a Store,
// concurrent Slots in a Store) to every request, each counted per key, the
// key read from the request by a KeyFunc: ClientIP (the connection's
// address, or the forwarding headers of trusted proxies read from the
// right), ClientID (the OAuth 2.0 client id), Header. The token endpoint
// of an OAuth 2.0 server, for example, limits each source address and
// each client id, and gives the client's event back when its secret is
// wrong, so that a forger naming the client spends nothing of its pace:
//
//	perIP, err := pace.New(50)
//	perClient, err := pace.New(5)
//	m, err := httplimit.New([]httplimit.Limit{
//		httplimit.Pace(perIP, httplimit.ClientIP(), httplimit.Name("per-ip")),
//		httplimit.Pace(perClient, httplimit.ClientID(), httplimit.Name("per-client"),
//			httplimit.ReturnOn(http.StatusUnauthorized)),
//	})
//	http.Handle("/token", m.Wrap(tokenHandler))
//
// Where verifying the presentation is slow (a password hash), use
// DecideAfterVerify and Verified instead of ReturnOn alone. A request that
// costs more than one event (the tokens of an LLM call) reserves an
// estimate with Cost, and the handler settles the actual with Settle.
// Limiter is the same machinery without HTTP, for other transports.
package httplimit
