package e2e_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/certtest"
	"github.com/fastlimit/fastlimit/internal/testing/envoysim"
	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// Issue 29's fairness, on the binary and real Redis (docs/rlqs.md,
// "Earned demand", "Client identity"), at Envoy's 5 s report periods.

// TestRLQSEarnedDemand: one honest Envoy asking 80/s of the 100/s tier
// limit against 50 Envoys, or one Envoy of 50 tenant ids, each claiming
// 2,000/s of denied requests it never sends: the honest one is admitted
// at least 90% of its fair share, its demand of 80/s.
func TestRLQSEarnedDemand(t *testing.T) {
	t.Parallel()
	const period = envoyPeriod
	for _, streams := range []int{50, 1} {
		t.Run(fmt.Sprintf("%d dishonest streams", streams), func(t *testing.T) {
			t.Parallel()
			q := newQuotaFleet(t, period, quotaReplicas(t, 1, period))
			honest := q.fleet.Send(q.envoy(0), map[string]string{"tier": "honest"}, 80)
			var liars []*envoysim.Envoy
			for range streams {
				liars = append(liars, q.envoyOn(envoysim.Config{ClaimDenied: 2000}, envoysim.FailoverDialer(0, q.conns...)))
			}
			for i := range 50 {
				liars[i%len(liars)].Request(map[string]string{"tier": fmt.Sprintf("t%d", i)})
			}
			// From the third period on (docs/rlqs.md, "The bound").
			q.run(3 * period)
			got := q.admitted(2*period, honest)[0]
			t.Logf("the honest Envoy admitted %.1f/s", got)
			if got < 0.9*80 {
				t.Errorf("the honest Envoy admitted %.1f/s, under 90%% of its demand (80/s)", got)
			}
		})
	}
}

// mtlsDialer dials the binary's gRPC listener with a client certificate.
func mtlsDialer(t *testing.T, addr string, f *certtest.Files, cert tls.Certificate) envoysim.Dialer {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: certtest.Pool(f.CA), Certificates: []tls.Certificate{cert}, ServerName: "localhost",
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return envoysim.GRPCDialer(cc)
}

// TestRLQSClientIdentity: with mTLS on the gRPC port, 50 Envoys of one
// SPIFFE identity count as one client: the Envoy of another identity is
// admitted half the 100/s limit against them. With
// --rlqs-require-client-identity, a stream whose certificate names no
// identity (no SPIFFE id, an empty subject) is refused Unauthenticated.
func TestRLQSClientIdentity(t *testing.T) {
	t.Parallel()
	const period = envoyPeriod
	f := certtest.NewFiles(t)
	fs := quotaReplicas(t, 1, period, "--grpc-tls", "--grpc-tls-cert", f.ServerCert, "--grpc-tls-key", f.ServerKey,
		"--grpc-tls-client-ca", f.CAFile, "--rlqs-require-client-identity")
	q := &quotaFleet{t: t, period: period}
	t.Cleanup(func() {
		for _, e := range q.envoys {
			e.Close()
		}
	})
	leaf := func(o certtest.Options) tls.Certificate {
		o.Client = true
		return f.CA.Issue(t, o).TLS(t)
	}
	alone := mtlsDialer(t, fs[0].GRPC, f, leaf(certtest.Options{CommonName: "alone"}))
	crowd := mtlsDialer(t, fs[0].GRPC, f, leaf(certtest.Options{CommonName: "crowd", URIs: []string{"spiffe://example.org/crowd"}}))
	ts := []*envoysim.Traffic{q.fleet.Send(q.envoyOn(envoysim.Config{}, alone), map[string]string{"tier": "alone"}, 300)}
	for i := range 50 {
		ts = append(ts, q.fleet.Send(q.envoyOn(envoysim.Config{}, crowd), map[string]string{"tier": fmt.Sprint("c", i)}, 300))
	}
	q.run(2 * period)
	got := q.admitted(2*period, ts...)
	t.Logf("alone %.1f/s, the crowd %.1f/s", got[0], total(got[1:]))
	if got[0] < 0.9*50 {
		t.Errorf("the lone identity admitted %.1f/s, want half the limit (50/s) against one identity", got[0])
	}
	q.checkClean()

	nameless := mtlsDialer(t, fs[0].GRPC, f, leaf(certtest.Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := nameless(ctx)
	if err == nil {
		// A Send on a stream the server has ended says io.EOF; its status
		// comes from Recv.
		if err = s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "d"}); err == nil || errors.Is(err, io.EOF) {
			_, err = s.Recv()
		}
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("a stream without identity: %v, want Unauthenticated", err)
	}
}

// TestRLQSOwnRedisPool: the demand exchanges run on connections of their
// own, named fastlimit-rlqs and at most --rlqs-redis-pool-size besides
// the subscriber, apart from RateLimitService's (docs/operations.md,
// "RLQS and RLS").
func TestRLQSOwnRedisPool(t *testing.T) {
	t.Parallel()
	const period = envoyPeriod
	r := redistest.StartServer(t)
	fs := quotaReplicasOn(t, []string{"--redis-url", "redis://" + r.Addr, "--redis-pool-size", "3"}, 1, period,
		"--rlqs-redis-pool-size", "2")
	q := newQuotaFleet(t, period, fs)
	for i := range 30 {
		q.fleet.Send(q.envoy(0), map[string]string{"tier": fmt.Sprint("t", i)}, 20)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		decideN(t, fs[0].Client, "d", "name", "a", 200)
	}()
	q.run(period + time.Second) // the subscriptions and a report each
	<-done
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	list, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	named, others := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		switch {
		case strings.Contains(line, " flags=P "): // the Watch of freed rates
		case strings.Contains(line, " name=fastlimit-rlqs "):
			named++
		case !strings.Contains(line, " cmd=client|list "):
			others++
		}
	}
	if named < 1 || named > 2 || others < 1 {
		t.Errorf("%d fastlimit-rlqs connections (want 1 or 2), %d others (want RLS's)\n%s", named, others, list)
	}
}
