package e2e_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// budgetAlgorithms are the rules the token budget runs on: each user may
// spend 100 tokens a day. A stream-done charge past what is left must be
// counted, so that the next check is refused: a fixed window counts denied
// hits anyway; a sliding window and a token bucket do with `charge:
// always` (rules.md), the bucket going into debt that its refill pays back.
var budgetAlgorithms = []struct{ name, rule string }{
	{"fixed_window", "algorithm: fixed_window"},
	{"sliding_window", "algorithm: sliding_window, charge: always"},
	{"token_bucket", "algorithm: token_bucket, burst: 100, charge: always"},
}

// budgetSources are budget.yaml's two ways of reading the tokens a
// response used: its routes.
var budgetSources = []struct{ name, path string }{
	{"response header", "/resp"},
	{"dynamic metadata", "/meta"},
}

func budgetRules(rule string) string {
	return fmt.Sprintf(`domain: envoy-budget
descriptors:
  - key: budget
    value: tokens
    descriptors:
      - key: user
        rate_limit: {name: tokens_per_user, unit: day, requests_per_unit: 100, %s}
`, rule)
}

// tokensUpstream answers each request with x-tokens-used set to its
// tokens query parameter: the tokens a model's answer took.
func tokensUpstream(t *testing.T) *envoytest.Upstream {
	return envoytest.StartUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-tokens-used", r.URL.Query().Get("tokens"))
		_, _ = w.Write([]byte("answer"))
	}))
}

// TestEnvoyTokenBudget runs the AI gateway's token budget through Envoy
// (budget.yaml): a check before each request charges nothing, and the
// tokens the response reports are charged after it, once the stream is
// done. With 100 tokens and answers of 40, three requests pass (the third
// spends 120) and the fourth is refused with 429; the refused one charges
// nothing more.
func TestEnvoyTokenBudget(t *testing.T) {
	const cost, budget = 40, 100
	for _, alg := range budgetAlgorithms {
		for _, src := range budgetSources {
			t.Run(alg.name+"/"+src.name, func(t *testing.T) {
				fl := startAdmin(t, files.Dir(t, map[string]string{"b.yaml": budgetRules(alg.rule)}))
				up := tokensUpstream(t)
				f := startFront(t, "budget", envoyTemplate(t, "budget.yaml"), map[string]string{tmplRLS: fl.GRPC, tmplUpstream: up.Addr})
				hits := `fastlimit_rule_total_hits_total{domain="envoy-budget",rule="tokens_per_user"}`
				attempt(t, f, 24*time.Hour, func(c *envoytest.Client) error {
					user := "x-user: " + c.Source
					spent := series(t, fl, hits)
					for i := 1; i <= 4; i++ {
						r, err := f.checked(t, c, "GET", fmt.Sprintf("%s?tokens=%d", src.path, cost), user)
						if err != nil {
							return err
						}
						if want := http.StatusOK; i < 4 && r.Code != want || i == 4 && r.Code != http.StatusTooManyRequests {
							return fmt.Errorf("request %d, %d tokens spent of %d: %d", i, (i-1)*cost, budget, r.Code)
						}
						if i < 4 {
							// The charge follows the response: wait for
							// FastLimit to count it before the next check.
							spent = waitSeries(t, fl, hits, spent+cost, 30*time.Second)
						}
					}
					return nil
				})
				// The 429 had no upstream answer, so no tokens to charge:
				// Envoy skips its stream-done descriptor (and says so).
				got := f.client(t).Do(t, "GET", src.path+"?tokens=1", "x-user: someone-else")
				if got.Code != http.StatusOK {
					t.Fatalf("another user: %d", got.Code)
				}
				waitSeries(t, fl, hits, 3*cost+1, 30*time.Second)
				if n := series(t, fl, hits); int(n)%cost != 1 {
					t.Errorf("FastLimit counted %v tokens, want multiples of %d and the other user's 1: a check (hits_addend 0) or the 429 was charged", n, cost)
				}
			})
		}
	}
}
