module github.com/ratepace/pace/examples/llmgateway

go 1.24.0

replace (
	github.com/ratepace/pace => ../..
	github.com/ratepace/pace/redisstore => ../../redisstore
)

require (
	github.com/ratepace/pace v1.0.0
	github.com/ratepace/pace/redisstore v1.0.0
	github.com/redis/go-redis/v9 v9.17.3
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	golang.org/x/sync v0.18.0 // indirect
)
