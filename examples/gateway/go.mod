module github.com/ratepace/pace/examples/gateway

go 1.24.0

replace (
	github.com/ratepace/pace => ../..
	github.com/ratepace/pace/redisstore => ../../redisstore
)

require (
	github.com/prometheus/client_golang v1.23.2
	github.com/ratepace/pace v1.0.0
	github.com/ratepace/pace/redisstore v1.0.0
	github.com/redis/go-redis/v9 v9.17.3
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sync v0.18.0 // indirect
	golang.org/x/sys v0.35.0 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)
