// Command callgrind writes a stream of rate-limit calls in RESP for
// redis-cli --pipe: take.lua calls of n decisions of one algorithm on keys
// drawn from a key space (FastLimit's batched path), or the INCRBY and
// EXPIRE pairs envoyproxy/ratelimit sends per decision. run.sh feeds it to
// a redis-server under valgrind's callgrind, which counts the server's
// instructions: the same for the same input whatever else the machine is
// doing.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	calls := flag.Int("calls", 500, "calls (take) or requests (ref)")
	n := flag.Int("n", 20, "decisions per call")
	keys := flag.Int("keys", 100000, "identifiers")
	sha := flag.String("sha", "", "take.lua's digest (mode take)")
	mode := flag.String("mode", "take", "take: FastLimit's take.lua; ref: the reference's INCRBY+EXPIRE per decision")
	alg := flag.String("alg", "fixed", "take.lua's algorithm: fixed, sliding or bucket")
	window := flag.Int("window", 60, "window (fixed, sliding) or refill period (bucket), seconds")
	flag.Parse()
	params, tail, ok := paramSet(*alg, *window)
	if !ok {
		fmt.Fprintf(os.Stderr, "callgrind: unknown algorithm %q\n", *alg)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	rng := rand.New(rand.NewPCG(1, 2))
	cmd := func(args ...string) {
		fmt.Fprintf(w, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(w, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	for c := 0; c < *calls; c++ {
		if *mode == "ref" {
			for range *n {
				k := "bench_user_" + strconv.Itoa(rng.IntN(*keys)) + "_1764547200"
				cmd("INCRBY", k, "1")
				cmd("EXPIRE", k, strconv.Itoa(*window))
			}
			continue
		}
		// take.lua: numkeys, one key per group (the ops of a key together,
		// as the store sends them, with the tail the store appends), the
		// tag, the map (every decision uses parameter set 1), the groups'
		// sizes, then set 1 at Redis TIME, cost 1.
		var order []string
		runs := map[string]int{}
		for range *n {
			k := "ratelimit:{bench/user=" + strconv.Itoa(rng.IntN(*keys)) + "}:default:" + tail
			if runs[k] == 0 {
				order = append(order, k)
			}
			runs[k]++
		}
		args := []string{"EVALSHA", *sha, strconv.Itoa(len(order))}
		args = append(args, order...)
		groups := make([]byte, len(order))
		for i, k := range order {
			groups[i] = byte(runs[k])
		}
		args = append(args, strconv.Itoa(c+1), strings.Repeat("\x01", *n), string(groups))
		args = append(args, params...)
		cmd(args...)
	}
}

// paramSet returns take.lua's parameter set for a limit of 4e9 requests a
// window that never denies, at Redis TIME, cost 1 request, and the tail the
// store appends to a group's key: a fixed window's start by this clock (the
// stream is sent within the window but for one that ends meanwhile), or a
// bucket's suffix.
func paramSet(alg string, window int) (params []string, tail string, ok bool) {
	ms := strconv.Itoa(window * 1000)
	switch alg {
	case "fixed":
		now := time.Now().Unix()
		guess := strconv.FormatInt(now-now%int64(window), 10)
		return []string{"0", "0", "4000000000000", ms, "1000", guess}, guess, true
	case "sliding":
		return []string{"1", "0", "4000000000000", ms, "1000"}, "", true
	case "bucket":
		// 4e12 milli-tokens a window: num/den = 4e12 / (window * 1000).
		num, den := int64(4_000_000_000_000), int64(window*1000)
		for a, b := num, den; ; {
			if b == 0 {
				num, den = num/a, den/a
				break
			}
			a, b = b, a%b
		}
		return []string{"2", "0", "4000000000000", strconv.FormatInt(num, 10), strconv.FormatInt(den, 10), ms, "1000"}, "tokens", true
	}
	return nil, "", false
}
