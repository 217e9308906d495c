module github.com/ratepace/pace/pacertest

go 1.24.0

require (
	github.com/go-chi/httprate v0.16.1
	github.com/ratepace/pace v1.0.0
	github.com/sethvargo/go-limiter v0.7.1
	github.com/throttled/throttled/v2 v2.15.0
	github.com/ulule/limiter/v3 v3.11.2
)

require (
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	golang.org/x/sync v0.18.0 // indirect
	golang.org/x/sys v0.35.0 // indirect
)

replace github.com/ratepace/pace => ../
