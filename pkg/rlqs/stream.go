package rlqs

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
)

type grpcStream = grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]

type action = rlqspb.RateLimitQuotaResponse_BucketAction

// stream is one Envoy's StreamRateLimitQuotas call: the buckets reported
// on it and not abandoned, and the actions waiting. Only its handler
// goroutine sends and adds or removes buckets; others (pushes) read
// buckets and queue actions under mu.
type stream struct {
	svc    *Service
	id     string // unique in the replica
	group  string // its clients' group: its identity's, or its own
	srv    grpcStream
	domain string
	cancel func(error)

	mu         sync.Mutex
	buckets    map[string]*envoyBucket // by canonical id
	pending    map[string]pending
	order      []string
	wake       chan struct{} // signalled when actions are queued
	in         inbox         // the report waiting, guarded by mu
	lastReport time.Time     // of the last report handled (Options.Now)
	swept      time.Time     // the buckets' last staleness check; the handler's
}

// pending is an action waiting to be sent; a share's tells its division
// what the Envoy holds once it is sent.
type pending struct {
	a      *action
	b      *envoyBucket
	share  float64
	seq    uint64
	ledger bool // a share, or a blanket rule of a limited bucket (0)
}

// envoyBucket is one bucket an Envoy holds, as its stream's state.
type envoyBucket struct {
	st     *stream
	id     map[string]string // as Envoy sent it
	text   string            // canonical form
	client string            // the (stream, bucket) client of a division

	// Guarded by the handler goroutine: set while handling reports.
	set        *descriptors.Set // res was resolved under it
	res        *resolution
	div        *division // nil unless res is limited
	lastActive time.Time
	lastNamed  time.Time

	// Guarded by div.mu: its part of the division's ledger.
	target      float64 // the share the division gives it, settled
	cutTo       float64 // the cut on its way, while cutting
	cutting     bool
	raiseDue    bool      // a report named it since its last settle
	unpublished bool      // the store holds a higher rate than its Assigned
	maxTokens   float64   // the burst of its last assignment
	adoptLeft   float64   // what it holds of its old stream's, to adopt (moved)
	crediting   bool      // held out until moved decides (division.join)
	movedAt     time.Time // when its Envoy came from another stream
	wantedAt    time.Time // its last notice of a rate wanted (claimWanted)
	seq         uint64    // of its last action queued
}

func newStream(s *Service, id string, srv grpcStream, cancel func(error)) *stream {
	return &stream{
		svc: s, id: id, srv: srv, cancel: cancel,
		buckets: map[string]*envoyBucket{},
		pending: map[string]pending{},
		wake:    make(chan struct{}, 1),
		in:      inbox{ready: make(chan struct{}, 1), taken: make(chan struct{}, 1)},
	}
}

// clientID names a (stream, bucket) client: its group (quota.IdentityOf),
// the stream and a digest of the canonical bucket id, so that one
// stream's buckets are two clients of one group.
func clientID(group, stream, text string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(text))
	return group + "|" + stream + "-" + strconv.FormatUint(h.Sum64(), 36)
}

// groupOf is the group of a stream's clients: a digest of its identity,
// or, without one, the stream itself (unique among replicas).
func groupOf(identity, replica, stream string) string {
	if identity == "" {
		return "s" + replica + "." + stream
	}
	sum := sha256.Sum256([]byte(identity))
	return "i" + hex.EncodeToString(sum[:16])
}

// queue queues an action for a bucket the Envoy holds, replacing any, and
// wakes the handler; false (nothing queued) if it no longer holds it.
func (st *stream) queue(text string, p pending) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.buckets[text] == nil {
		return false
	}
	st.queueLocked(text, p)
	return true
}

func (st *stream) queueLocked(text string, p pending) {
	old, ok := st.pending[text]
	if !ok {
		st.order = append(st.order, text)
		st.svc.inHand.Add(1)
	} else if old.ledger && p.ledger && old.seq > p.seq {
		return // a later action of the division's is waiting
	}
	st.pending[text] = p
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// abandon forgets a bucket and queues its abandon_action.
func (st *stream) abandon(b *envoyBucket) {
	st.mu.Lock()
	if st.buckets[b.text] == b {
		delete(st.buckets, b.text)
		st.svc.held.Add(-1)
	}
	st.queueLocked(b.text, pending{a: abandonAction(b.id)})
	st.mu.Unlock()
}

// add records a bucket the Envoy just subscribed to.
func (st *stream) add(b *envoyBucket) {
	st.mu.Lock()
	st.buckets[b.text] = b
	st.mu.Unlock()
}

// maxResponseBytes is about the most one response carries: more actions
// go in further responses, each well under gRPC's 4 MiB default receive
// limit (Envoy's google_grpc client has it).
const maxResponseBytes = 1 << 20

// flush sends the queued actions, in responses of up to about
// maxResponseBytes, never an empty one; once they are sent, each
// division learns what its Envoy now holds, and those where a cut freed
// a rate settle again.
func (st *stream) flush() error {
	st.mu.Lock()
	if len(st.order) == 0 {
		st.mu.Unlock()
		return nil
	}
	var resps []*rlqspb.RateLimitQuotaResponse
	var ledger []pending
	size := maxResponseBytes
	for _, text := range st.order {
		p := st.pending[text]
		n := len(text) + 48 // an action's bytes, about
		if size+n > maxResponseBytes {
			resps = append(resps, &rlqspb.RateLimitQuotaResponse{})
			size = 0
		}
		size += n
		r := resps[len(resps)-1]
		r.BucketAction = append(r.BucketAction, p.a)
		if p.ledger {
			ledger = append(ledger, p)
		}
	}
	clear(st.pending)
	queued := len(st.order)
	st.order = st.order[:0]
	st.mu.Unlock()
	s := st.svc
	defer s.inHand.Add(-int64(queued)) // once sent, and what it freed settled
	for _, resp := range resps {
		s.obs.ActionsSent(s.label(st.domain), len(resp.BucketAction))
		if err := st.srv.Send(resp); err != nil {
			return err
		}
	}
	var freed divisions
	for _, p := range ledger {
		if dv := p.b.div; dv != nil && dv.sent(p.b, p.share, p.seq, s.opts.Store != nil) {
			freed.add(dv)
		}
	}
	if len(freed.list) > 0 {
		s.settle(st.srv.Context(), freed.list, nil, nil)
	}
	return nil
}

// divisions is a list of divisions, each once.
type divisions struct {
	list []*division
	seen map[*division]bool // once the list is longer than divisionsScan
}

// divisionsScan is the longest list searched without a map: a report
// names a few divisions, most often one.
const divisionsScan = 8

func (d *divisions) add(dv *division) {
	if d.seen == nil {
		if slices.Contains(d.list, dv) {
			return
		}
		d.list = append(d.list, dv)
		if len(d.list) > divisionsScan {
			d.seen = make(map[*division]bool, 2*len(d.list))
			for _, v := range d.list {
				d.seen[v] = true
			}
		}
		return
	}
	if !d.seen[dv] {
		d.seen[dv] = true
		d.list = append(d.list, dv)
	}
}

// snapshot returns the stream's buckets.
func (st *stream) snapshot() []*envoyBucket {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*envoyBucket, 0, len(st.buckets))
	for _, b := range st.buckets {
		out = append(out, b)
	}
	return out
}

// reported records the time of a report, for the staleness checks.
func (st *stream) reported(now time.Time) {
	st.mu.Lock()
	st.lastReport = now
	st.mu.Unlock()
}

// silentSince is the time of the stream's last report (zero: none yet).
func (st *stream) silentSince() time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.lastReport
}
