package main

import "flag"

// redisOptions configure the Redis deployment FastLimit talks to.
type redisOptions struct{}

func addRedisFlags(fs *flag.FlagSet, o *redisOptions) {}
