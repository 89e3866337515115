package main

import (
	"context"

	"github.com/fastlimit/fastlimit/bench/benchproc"
)

// infoCPU runs redis-cli INFO against addr and parses it.
func infoCPU(ctx context.Context, cli, addr string) (benchproc.RedisStats, error) {
	out, err := redisCLI(ctx, cli, addr, "INFO", "cpu", "stats", "commandstats")
	if err != nil {
		return benchproc.RedisStats{}, err
	}
	return benchproc.ParseInfo(out)
}
