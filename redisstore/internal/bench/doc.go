// Package bench compares redisstore with github.com/go-redis/redis_rate on
// one Redis server. It is a module of its own so that redis_rate never
// becomes a dependency of pace or redisstore.
package bench
