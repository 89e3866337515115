package main

import (
	"context"

	"github.com/fastlimit/fastlimit/internal/testing/procstat"
)

// infoCPU runs redis-cli INFO against addr and parses it.
func infoCPU(ctx context.Context, cli, addr string) (procstat.RedisStats, error) {
	out, err := redisCLI(ctx, cli, addr, "INFO", "cpu", "stats", "commandstats")
	if err != nil {
		return procstat.RedisStats{}, err
	}
	return procstat.ParseInfo(out)
}
