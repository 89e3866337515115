package rlqs

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fastlimit/fastlimit/pkg/quota"
)

// ErrClosed ends the streams of a closing service.
var ErrClosed = errors.New("rlqs: service closing")

// errSilent ends a stream that sent no report for Division.Stale.
var errSilent = errors.New("no usage report for 3 report periods: stream ended, its buckets no longer count")

// Service implements envoy.service.rate_limit_quota.v3.RateLimitQuotaService.
// It is safe for concurrent use. New starts nothing; the gRPC server runs
// a handler per stream; Close ends them.
type Service struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer

	opts     Options
	ttl      int64 // assignments' time to live, in seconds
	log      *zap.Logger
	resolver resolver
	obs      Observer
	logged   onceSet    // unmatched bucket ids logged
	idLines  lineBudget // their lines, at most maxIDLines a second

	mu        sync.Mutex
	divisions map[string]*division
	streams   map[*stream]struct{}
	closing   bool

	watching sync.Once          // the Notifier's Watch started
	unwatch  context.CancelFunc // stops it; guarded by mu
	watchers sync.WaitGroup

	workers   chan struct{} // Options.ReportWorkers' slots, nil: no bound
	seq       atomic.Uint64
	inHand    atomic.Int64 // reports, settles and actions not yet done (Idle)
	storeDown atomic.Bool  // the last exchange failed
	swept     atomic.Int64 // Unix ns of the last staleness sweep
	refusedAt atomic.Int64 // Unix ns of the last refused report logged
	held      atomic.Int64 // buckets the streams hold (MaxBuckets)

	bucketsRefusedAt, streamsRefusedAt atomic.Int64 // Unix ns of their last lines
	handlers                           sync.WaitGroup
}

// New returns a Service. It fails on invalid options.
func New(opts Options) (*Service, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if opts.Tracer == nil {
		opts.Tracer = noop.NewTracerProvider().Tracer("")
	}
	s := &Service{
		opts:      opts,
		ttl:       quota.TTL(opts.ReportPeriod, opts.TTLPeriods),
		log:       opts.Log.Named("rlqs"),
		resolver:  resolver{prefix: opts.KeyPrefix, unmatched: opts.Unmatched},
		obs:       opts.Observer,
		logged:    onceSet{max: maxLoggedIDs},
		idLines:   lineBudget{max: maxIDLines},
		divisions: map[string]*division{},
		streams:   map[*stream]struct{}{},
	}
	if opts.ReportWorkers > 0 {
		s.workers = make(chan struct{}, opts.ReportWorkers)
	}
	return s, nil
}

// Idle reports whether the service has nothing in hand: no report being
// handled, no division settling, no action waiting to be sent, no silent
// stream left to end. A test that steps a clock waits for it before the
// next step.
func (s *Service) Idle() bool {
	if s.inHand.Load() != 0 {
		return false
	}
	now := s.opts.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for st := range s.streams {
		if now.Sub(st.silentSince()) >= s.opts.Division.Stale {
			return false
		}
	}
	return true
}

// Register registers the service on a gRPC server.
func (s *Service) Register(g *grpc.Server) {
	rlqspb.RegisterRateLimitQuotaServiceServer(g, s)
}

// StreamRateLimitQuotas serves one Envoy's stream until it ends, the
// service closes, or it sends no report for Division.Stale (it ends then
// with DeadlineExceeded, its buckets no longer counting); a report of
// another domain ends it with InvalidArgument, one larger than
// Options.MaxReportBytes with ResourceExhausted; past MaxStreams it is
// refused with ResourceExhausted.
func (s *Service) StreamRateLimitQuotas(srv grpcStream) error {
	ctx, cancel := context.WithCancelCause(srv.Context())
	defer cancel(nil)
	st, err := s.open(srv, cancel)
	if err != nil {
		return err
	}
	defer func() { s.closeStream(st, context.Cause(ctx)) }()
	// The reader takes every report as it comes, merging those that come
	// while one waits for a worker (inbox).
	go func() {
		for {
			m, err := srv.Recv()
			if err == nil {
				err = s.checkSize(m)
			}
			if err == nil {
				err = st.offer(ctx, m)
			}
			if err != nil {
				if status.Code(err) == codes.ResourceExhausted {
					s.refused(st, err)
				}
				cancel(err)
				return
			}
		}
	}()
	// The silence timer, on the service's clock: it fires Stale after
	// the stream's last report, or its opening.
	stale := s.opts.Division.Stale
	silence := make(chan struct{}, 1)
	arm := func(d time.Duration) func() bool {
		return s.opts.Clock.AfterFunc(d, func() {
			select {
			case silence <- struct{}{}:
			default:
			}
		}).Stop
	}
	stop := arm(stale)
	defer func() { stop() }()
	for {
		// A report waits: with a worker budget, for a worker.
		var acquire chan<- struct{}
		if s.workers != nil && st.pendingReport() {
			acquire = s.workers
		}
		select {
		case <-ctx.Done():
			return streamEnd(context.Cause(ctx))
		case <-st.in.ready:
			stop()
			stop = arm(stale)
			if s.workers == nil {
				if err := st.handleNext(ctx); err != nil {
					cancel(err)
					return err
				}
			}
		case acquire <- struct{}{}:
			w := &worker{slots: s.workers, held: true}
			err := st.handleNext(withWorker(ctx, w))
			w.release()
			if err != nil {
				cancel(err)
				return err
			}
		case <-silence:
			if quiet := s.opts.Clock.Now().Sub(st.silentSince()); quiet < stale {
				stop = arm(stale - quiet)
				continue
			}
			cancel(errSilent)
			continue
		case <-st.wake:
		}
		if err := st.flush(); err != nil {
			return streamEnd(err)
		}
	}
}

// checkSize refuses a report larger than Options.MaxReportBytes.
func (s *Service) checkSize(m *rlqspb.RateLimitQuotaUsageReports) error {
	if limit := s.opts.MaxReportBytes; limit > 0 {
		if n := proto.Size(m); n > limit {
			return status.Errorf(codes.ResourceExhausted, "usage report of %d bytes is larger than the limit of %d bytes", n, limit)
		}
	}
	return nil
}

// handleNext handles the stream's waiting report, if one waits.
func (st *stream) handleNext(ctx context.Context) error {
	m := st.take()
	if m == nil {
		return nil
	}
	defer st.svc.inHand.Add(-1) // offer's
	return st.handle(ctx, m)
}

// streamEnd is the status a stream ends with after err.
func streamEnd(err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, context.Canceled):
		return nil
	case errors.Is(err, ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, errSilent):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return err
}

func (s *Service) open(srv grpcStream, cancel func(error)) (*stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, status.Error(codes.Unavailable, ErrClosed.Error())
	}
	identity := s.opts.Identity(srv.Context())
	if identity == "" && s.opts.RequireIdentity {
		s.obs.Unidentified()
		return nil, status.Error(codes.Unauthenticated, "an RLQS stream needs a client certificate (mTLS) to name its client")
	}
	if len(s.streams) >= s.opts.MaxStreams {
		return nil, s.refuseStream(srv)
	}
	s.watch()
	st := newStream(s, strconv.FormatUint(s.seq.Add(1), 36), srv, cancel)
	st.group = groupOf(identity, s.opts.Replica, st.id)
	st.lastReport = s.opts.Clock.Now()
	s.streams[st] = struct{}{}
	s.handlers.Add(1)
	return st, nil
}

// closeStream forgets a stream that ended for cause: its clients leave
// their divisions. The Envoy of a stream that went silent is taken to
// use nothing: its demand is deleted at once. Any other may still hold
// its shares until it reconnects, at its next report: they stay in the
// ledger for that long (Options.leftFor), its demand counting no more.
func (s *Service) closeStream(st *stream, cause error) {
	defer s.handlers.Done()
	// In hand from before the stream leaves s.streams (Idle sees a silent
	// one there) until what it freed is settled.
	s.inHand.Add(1)
	defer s.inHand.Add(-1)
	held := st.snapshot()
	s.held.Add(-int64(len(held))) // before it leaves s.streams (Totals)
	s.mu.Lock()
	delete(s.streams, st)
	s.mu.Unlock()
	silent := errors.Is(cause, errSilent)
	if silent {
		s.obs.Silent(s.label(st.domain))
		s.log.Info("RLQS stream ended: no usage report for 3 report periods",
			zap.String("stream", st.id), zap.String("peer", peerOf(st.srv)), zap.String("domain", st.domain))
	}
	now := s.opts.Clock.Now()
	until := now.Add(s.leftFor())
	if silent {
		until = now
	}
	var items []quota.Item
	var dvs divisions
	for _, b := range held {
		if dv := b.div; dv != nil {
			items = append(items, s.leave(b, now, until, !silent))
			dvs.add(dv)
		}
	}
	s.deleteDemand(items)
	s.settle(context.Background(), dvs.list, nil, nil)
}

// leftFor is how long the Envoy of a stream that ended may still hold
// its shares: until its next report opens a stream and is answered.
func (s *Service) leftFor() time.Duration {
	return s.opts.ReportPeriod + time.Second
}

// valueTTL is how long a client's value lives in the demand store: as
// long as its Envoy may hold the last share it was sent, a TTL after the
// value's last write (its demand counts only Division.Stale of it).
func (s *Service) valueTTL() time.Duration {
	return max(s.opts.Division.Stale, time.Duration(s.ttl)*time.Second+time.Second)
}

// adoptAfter is the age of a value whose replica no longer writes it:
// its client missed a report.
func (s *Service) adoptAfter() time.Duration {
	return s.opts.ReportPeriod * 3 / 2
}

// leave takes b's client out of its division; its Envoy may hold what it
// was assigned until until. The item deletes its demand, or with keep
// (and a time left) marks it quota.Left, holding that.
func (s *Service) leave(b *envoyBucket, now, until time.Time, keep bool) quota.Item {
	dv := b.div
	rate := dv.leave(b, now, until)
	s.release(dv)
	b.div = nil
	d := quota.Demand{Replica: s.opts.Replica, Client: b.client}
	if keep && rate > 0 && until.After(now) {
		d.Rate, d.Assigned = quota.Left, rate
		return quota.Item{Key: dv.key, Demand: d, Op: quota.Write}
	}
	return quota.Item{Key: dv.key, Demand: d, Op: quota.Delete}
}

// deleteDemand tells the store of clients gone, their values living
// leftFor; on a failure they expire instead.
func (s *Service) deleteDemand(items []quota.Item) {
	if s.opts.Store == nil || len(items) == 0 {
		return
	}
	if _, err := s.exchangeItems(context.Background(), items, s.leftFor(), s.storeNow(s.opts.Clock.Now())); err != nil {
		s.obs.StoreFailed()
		s.log.Debug("deleting demand failed; it expires instead", zap.Error(err))
		return
	}
	s.notify(itemKeys(items))
}

// exchangeBatch bounds the items of one store exchange: a larger one is
// sent as several in turn, each within its own StoreTimeout, so that an
// Envoy with many buckets does not make an exchange time out because it
// is long (docs/rlqs.md, "Large Envoys").
const exchangeBatch = 8192

// exchangeItems exchanges items with the store in batches of
// exchangeBatch; on an error, the batches before it were done.
func (s *Service) exchangeItems(ctx context.Context, items []quota.Item, ttl time.Duration, now time.Time) ([][]quota.Demand, error) {
	out := make([][]quota.Demand, 0, len(items))
	for i := 0; i < len(items); i += exchangeBatch {
		bctx, cancel := context.WithTimeout(ctx, s.opts.StoreTimeout)
		got, err := s.storeExchange(bctx, items[i:min(i+exchangeBatch, len(items))], ttl, now)
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// itemKeys are the keys of items, once each.
func itemKeys(items []quota.Item) []string {
	var keys []string
	seen := map[string]bool{}
	for _, it := range items {
		if !seen[it.Key] {
			seen[it.Key] = true
			keys = append(keys, it.Key)
		}
	}
	return keys
}

// sweep ends, at most every quarter period, the streams that sent no
// report for Division.Stale (each stream's own timer does it on the wall
// clock; this does it on Options.Now's).
func (s *Service) sweep(now time.Time) {
	last := s.swept.Load()
	if now.UnixNano()-last < int64(s.opts.ReportPeriod/4) || !s.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	s.mu.Lock()
	var silent []*stream
	for st := range s.streams {
		if now.Sub(st.silentSince()) >= s.opts.Division.Stale {
			silent = append(silent, st)
		}
	}
	s.mu.Unlock()
	for _, st := range silent {
		st.cancel(errSilent)
	}
}

// refused counts and logs a report refused for its size, at most one line
// a second.
func (s *Service) refused(st *stream, err error) {
	s.obs.ReportRefused(s.label(st.domain))
	if !logDue(&s.refusedAt) {
		return
	}
	s.log.Warn("RLQS usage report refused for its size (--rlqs-max-report-bytes); the stream ends and its assignments lapse",
		zap.String("stream", st.id), zap.String("peer", peerOf(st.srv)), zap.String("domain", st.domain), zap.Error(err))
}

// unmatched counts a bucket that matches no rule, and logs its id once,
// within maxIDLines lines a second; a line says how many new ids went
// unlogged since the line before.
func (s *Service) unmatched(st *stream, b *envoyBucket) {
	d := s.label(st.domain)
	s.obs.Unmatched(d)
	if !s.logged.add(st.domain + "\x00" + b.text) {
		return
	}
	ok, held := s.idLines.take(time.Now())
	if !ok {
		return
	}
	answer := "ALLOW_ALL"
	if s.opts.Unmatched == UnmatchedDeny {
		answer = "DENY_ALL"
	}
	s.log.Info("RLQS bucket matches no rule", zap.String("domain", st.domain), zap.String("bucket", b.text),
		zap.String("assigned", answer), zap.String("stream", st.id), zap.Int("ids_not_logged", held))
}

// PeerIdentity is the identity of a gRPC peer that presented a verified
// client certificate: its first SPIFFE URI SAN if it has one, else its
// subject; "" without one.
func PeerIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	cert := info.State.PeerCertificates[0]
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			return u.String()
		}
	}
	return cert.Subject.String()
}

// peerOf is the address of a stream's peer, or "".
func peerOf(srv grpcStream) string {
	if p, ok := peer.FromContext(srv.Context()); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// Close ends every stream with Unavailable (Envoy reopens its stream at
// its next report, on another replica) and refuses new ones. It waits
// for the handlers to return, as long as ctx allows.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for st := range s.streams {
		st.cancel(ErrClosed)
	}
	if s.unwatch != nil {
		s.unwatch()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.handlers.Wait()
		s.watchers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watch starts, once, the Notifier's Watch, if the store has one; s.mu
// is held.
func (s *Service) watch() {
	n, ok := s.opts.Store.(Notifier)
	if !ok {
		return
	}
	s.watching.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		s.unwatch = cancel
		s.watchers.Go(func() {
			if err := n.Watch(ctx, s.heard); err != nil {
				s.log.Debug("watching other replicas' notices stopped", zap.Error(err))
			}
		})
	})
}

// wantedMark starts the keys of notices of rates wanted (Notifier); a
// key without it is of rates freed.
const wantedMark = "\x01"

// heard is told that another replica freed rates in a bucket, or wants
// some for a client of its: a division with a local client that wants
// more (freed), or any local division of the bucket (wanted), reads the
// bucket again and settles; the settle cuts what the others' demand asks
// and tells them what it freed.
func (s *Service) heard(from, key string) {
	if from == s.opts.Replica {
		return
	}
	key, wanted := strings.CutPrefix(key, wantedMark)
	s.mu.Lock()
	dv := s.divisions[key]
	s.mu.Unlock()
	if dv == nil {
		return
	}
	if !wanted && !dv.wants() {
		// None of its clients wants more now, but the next report may:
		// it reads the bucket again rather than divide by what it last
		// read.
		dv.unread()
		return
	}
	s.inHand.Add(1)
	defer s.inHand.Add(-1)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.StoreTimeout)
	defer cancel()
	item := quota.Item{Key: key, Op: quota.Read, Fresh: s.opts.Division.Stale}
	ticket := dv.readTicket()
	got, err := s.opts.Store.Exchange(ctx, []quota.Item{item}, s.valueTTL(), s.storeNow(s.opts.Clock.Now()))
	if err != nil {
		s.noteStoreFailed(err)
		return
	}
	dv.setRemote(s.opts.Replica, got[0], s.opts.Clock.Now(), ticket)
	s.settle(ctx, []*division{dv}, nil, nil)
}

// notify tells the other replicas serving the divisions of keys that
// rates were freed there (or, keys marked wantedMark, are wanted).
func (s *Service) notify(keys []string) {
	n, ok := s.opts.Store.(Notifier)
	if !ok || len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.StoreTimeout)
	defer cancel()
	if err := n.Notify(ctx, s.opts.Replica, keys); err != nil {
		s.log.Debug("notifying the other replicas failed", zap.Error(err))
	}
}
