package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// The rule names of the memory rows' keys, as BENCHMARKS.md's earlier
// table had them.
var memoryRules = map[string]string{"fixed": "fw_hour", "sliding": "sw_hour", "bucket": "tb_hour"}

// memRow is what the keys of one row cost Redis.
type memRow struct {
	what      string
	ids, keys int64
	delta     int64   // used_memory after less before
	usage     float64 // MEMORY USAGE a key, averaged over samples
	sample    string  // a key
}

func (r memRow) perID() float64 { return float64(r.delta) / float64(r.ids) }

// measureMemory fills a redis-server of its own with o.ids identifiers a
// row, each hit h times (o.hits), through pkg/store (each algorithm) and
// as the reference writes them (INCRBY and EXPIRE of its key), and prints
// used_memory's growth per identifier, MEMORY USAGE per key, and the
// fixed window's key by part against the reference's.
func measureMemory(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	rec, err := startRecorder(ctx, o)
	if err != nil {
		return err
	}
	defer rec.stop()
	c := rec.client
	start := time.Now()
	var rows []memRow
	for _, h := range o.hits {
		for _, alg := range o.algs {
			fmt.Fprintf(stderr, "callgrind -memory: %s, %s\n", alg, plural(h, "hit"))
			row, err := memoryOf(ctx, c, o, fmt.Sprintf("%s, %s an identifier", algNames[alg], plural(h, "hit")), func(ids []int) error {
				return takeMemory(ctx, c, alg, ids, h)
			})
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
		if o.refs {
			fmt.Fprintf(stderr, "callgrind -memory: reference, %s\n", plural(h, "hit"))
			row, err := memoryOf(ctx, c, o, fmt.Sprintf("reference (INCRBY, EXPIRE), %s an identifier", plural(h, "hit")), func(ids []int) error {
				return referenceMemory(ctx, c, ids, h)
			})
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
	}
	fmt.Fprintf(stdout, "`go run ./bench/callgrind%s`: %s identifiers a row, each hit as many times in one window of an hour (limits that never deny), on redis-server %s; %s.\n\n",
		quoteArgs(o.args), thousandsInt(o.ids), redisVersion(ctx, c), time.Since(start).Round(time.Second))
	fmt.Fprintln(stdout, "| keys of | keys (DBSIZE) | used_memory growth a key | MEMORY USAGE a key | sample key | its length |")
	fmt.Fprintln(stdout, "| --- | --- | --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Fprintf(stdout, "| %s | %s | %.0f B | %.0f B | `%s` | %d |\n", r.what, thousands(r.keys), float64(r.delta)/float64(r.keys), r.usage, r.sample, len(r.sample))
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "Per identifier (each has one key): ")
	var per []string
	for _, r := range rows {
		per = append(per, fmt.Sprintf("%s %.0f B", r.what, r.perID()))
	}
	fmt.Fprintln(stdout, strings.Join(per, "; ")+".")
	fmt.Fprintln(stdout)
	printKeyParts(stdout)
	return nil
}

// algNames title the algorithms.
var algNames = map[string]string{"fixed": "fixed window", "sliding": "sliding window", "bucket": "token bucket"}

// memoryOf empties Redis, fills it with fill over o.ids identifiers (in
// random order, in calls of 100), and measures what the keys cost.
func memoryOf(ctx context.Context, c *redis.Client, o *options, what string, fill func(ids []int) error) (memRow, error) {
	row := memRow{what: what, ids: int64(o.ids)}
	if err := c.FlushAll(ctx).Err(); err != nil {
		return row, err
	}
	before, err := usedMemory(ctx, c)
	if err != nil {
		return row, err
	}
	ids := rand.New(rand.NewPCG(3, 9)).Perm(o.ids)
	for from := 0; from < len(ids); from += 100 {
		if err := fill(ids[from:min(from+100, len(ids))]); err != nil {
			return row, fmt.Errorf("%s: %w", what, err)
		}
	}
	after, err := usedMemory(ctx, c)
	if err != nil {
		return row, err
	}
	row.delta = after - before
	if row.keys, err = c.DBSize(ctx).Result(); err != nil {
		return row, err
	}
	const samples = 200
	var sum int64
	for range samples {
		k, err := c.RandomKey(ctx).Result()
		if err != nil {
			return row, err
		}
		n, err := c.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return row, err
		}
		sum += n
		row.sample = k
	}
	row.usage = float64(sum) / samples
	return row, nil
}

// usedMemory reads INFO memory's used_memory.
func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO memory has no used_memory")
}

// redisVersion is INFO server's redis_version.
func redisVersion(ctx context.Context, c *redis.Client) string {
	info, _ := c.Info(ctx, "server").Result()
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

// memoryKey is the base key pkg/limiter builds for identifier i of alg's
// rule: "ratelimit:{bench/fw_hour=user-i}:default:".
func memoryKey(alg string, i int) string {
	e := []descriptors.Entry{{Key: memoryRules[alg], Value: "user-" + strconv.Itoa(i)}}
	return string(limiter.AppendKey(nil, "ratelimit", "bench", descriptors.NewLimit(1, descriptors.Hour), e, limiter.DefaultTenant))
}

// takeMemory decides h hits of each of ids through pkg/store.
func takeMemory(ctx context.Context, c *redis.Client, alg string, ids []int, h int) error {
	s := store.NewRedis(c, nil, store.RedisOptions{})
	defer s.Close()
	ops := make([]limiter.Op, len(ids))
	for i, id := range ids {
		ops[i] = algorithms[alg]
		if alg == "bucket" {
			// 2 million requests, refilled a thousandth of one an hour:
			// its key lives the hour (a bucket refilled full has none),
			// and the refill stays exact.
			ops[i].Burst, ops[i].RateNum, ops[i].RateDen = 2e9, 1, window
		}
		ops[i].Key = memoryKey(alg, id)
	}
	res := make([]limiter.Result, len(ops))
	for range h {
		if err := s.Take(ctx, ops, res); err != nil {
			return err
		}
	}
	return nil
}

// referenceKey is envoyproxy/ratelimit's key of identifier i in the
// window starting at start, Unix seconds: domain_key_value_start.
func referenceKey(i int, start int64) string {
	return "bench_" + memoryRules["fixed"] + "_user-" + strconv.Itoa(i) + "_" + strconv.FormatInt(start, 10)
}

// referenceMemory writes h hits of each of ids as the reference does:
// INCRBY and EXPIRE, pipelined.
func referenceMemory(ctx context.Context, c *redis.Client, ids []int, h int) error {
	start := time.Now().Unix() / (window / 1000) * (window / 1000)
	for range h {
		pipe := c.Pipeline()
		for _, id := range ids {
			k := referenceKey(id, start)
			pipe.IncrBy(ctx, k, 1)
			pipe.Expire(ctx, k, window*time.Millisecond)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// printKeyParts writes a fixed window's key by part against the
// reference's, and what their lengths cost: Redis stores a key of 32 to
// 255 bytes with a 3-byte header and a NUL, in jemalloc's size class.
func printKeyParts(w io.Writer) {
	start := strconv.FormatInt(time.Now().Unix()/3600*3600, 10)
	base := memoryKey("fixed", 93607)
	ours := base + start
	ref := referenceKey(93607, time.Now().Unix()/3600*3600)
	id := "bench/" + memoryRules["fixed"] + "=user-93607"
	parts := []struct{ part, ours, ref string }{
		{"prefix and its separator", "ratelimit:", ""},
		{"hash tag", "{ }", ""},
		{"identifier (domain, key, value)", id, "bench_" + memoryRules["fixed"] + "_user-93607"},
		{"tenant and its separators", ":default:", "_"},
		{"window start", start, start},
	}
	fmt.Fprintf(w, "A fixed window's key by part, against the reference's (`%s`, `%s`):\n\n", ours, ref)
	fmt.Fprintln(w, "| part | FastLimit | bytes | reference | bytes |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, p := range parts {
		o := strings.ReplaceAll(p.ours, " ", "")
		fmt.Fprintf(w, "| %s | `%s` | %d | %s | %d |\n", p.part, o, len(o), orNone(p.ref), len(p.ref))
	}
	fmt.Fprintf(w, "| the key | | %d | | %d |\n", len(ours), len(ref))
	fmt.Fprintf(w, "| its allocation (3-byte header, NUL, jemalloc's class) | | %d | | %d |\n\n", sizeClass(len(ours)+4), sizeClass(len(ref)+4))
}

func orNone(s string) string {
	if s == "" {
		return "—"
	}
	return "`" + s + "`"
}

// sizeClass is jemalloc's size class of an n-byte allocation, for n up to
// 256.
func sizeClass(n int) int {
	switch {
	case n <= 8:
		return 8
	case n <= 128:
		return (n + 15) / 16 * 16
	}
	return (n + 31) / 32 * 32
}

// thousandsInt is thousands of an int.
func thousandsInt(n int) string { return thousands(int64(n)) }
