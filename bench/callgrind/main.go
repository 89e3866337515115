// Command callgrind writes a stream of rate-limit calls in RESP for
// redis-cli --pipe: take.lua calls of n fixed-window decisions on keys
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
)

func main() {
	calls := flag.Int("calls", 500, "calls (take) or requests (ref)")
	n := flag.Int("n", 20, "decisions per call")
	keys := flag.Int("keys", 100000, "identifiers")
	sha := flag.String("sha", "", "take.lua's digest (mode take)")
	mode := flag.String("mode", "take", "take: FastLimit's take.lua; ref: the reference's INCRBY+EXPIRE per decision")
	flag.Parse()
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
				cmd("EXPIRE", k, "60")
			}
			continue
		}
		// take.lua: numkeys, the keys, the tag, the map (every decision
		// uses parameter set 1), then set 1: fixed window, Redis TIME,
		// limit, 60 s, cost 1.
		args := []string{"EVALSHA", *sha, strconv.Itoa(*n)}
		for range *n {
			args = append(args, "ratelimit:{bench/user="+strconv.Itoa(rng.IntN(*keys))+"}:default:")
		}
		args = append(args, strconv.Itoa(c+1), strings.Repeat("\x01", *n), "0", "0", "4000000000000", "60000", "1000")
		cmd(args...)
	}
}
