module github.com/ratepace/pace/redisstore/internal/bench

go 1.24.0

replace (
	github.com/ratepace/pace => ../../..
	github.com/ratepace/pace/redisstore => ../..
)

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/ratepace/pace/redisstore v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.17.3
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/ratepace/pace v0.0.0-00010101000000-000000000000 // indirect
	golang.org/x/sync v0.18.0 // indirect
)
