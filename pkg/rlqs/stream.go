package rlqs

import (
	"hash/fnv"
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
	srv    grpcStream
	domain string
	cancel func(error)

	mu      sync.Mutex
	buckets map[string]*envoyBucket // by canonical id
	pending map[string]*action
	order   []string
	wake    chan struct{} // signalled when actions are queued
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
	last       sent // the action last sent
}

// sent is an action in comparable form.
type sent struct {
	kind kind
	tb   [3]int64 // max tokens, tokens per fill, fill seconds
}

func newStream(s *Service, id string, srv grpcStream, cancel func(error)) *stream {
	return &stream{
		svc: s, id: id, srv: srv, cancel: cancel,
		buckets: map[string]*envoyBucket{},
		pending: map[string]*action{},
		wake:    make(chan struct{}, 1),
	}
}

// clientID names a (stream, bucket) client: the stream and a digest of
// the canonical bucket id, so that one stream's buckets are two clients.
func clientID(stream, text string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(text))
	return stream + "-" + strconv.FormatUint(h.Sum64(), 36)
}

// queue queues an action for a bucket the Envoy holds, replacing any, and
// wakes the handler; false (nothing queued) if it no longer holds it.
func (st *stream) queue(text string, a *action) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.buckets[text] == nil {
		return false
	}
	st.queueLocked(text, a)
	return true
}

func (st *stream) queueLocked(text string, a *action) {
	if _, ok := st.pending[text]; !ok {
		st.order = append(st.order, text)
	}
	st.pending[text] = a
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// abandon forgets a bucket and queues its abandon_action.
func (st *stream) abandon(b *envoyBucket) {
	st.mu.Lock()
	delete(st.buckets, b.text)
	st.queueLocked(b.text, abandonAction(b.id))
	st.mu.Unlock()
}

// add records a bucket the Envoy just subscribed to.
func (st *stream) add(b *envoyBucket) {
	st.mu.Lock()
	st.buckets[b.text] = b
	st.mu.Unlock()
}

// flush sends the queued actions in one response, never an empty one.
func (st *stream) flush() error {
	st.mu.Lock()
	if len(st.order) == 0 {
		st.mu.Unlock()
		return nil
	}
	resp := &rlqspb.RateLimitQuotaResponse{BucketAction: make([]*action, 0, len(st.order))}
	for _, text := range st.order {
		resp.BucketAction = append(resp.BucketAction, st.pending[text])
	}
	clear(st.pending)
	st.order = st.order[:0]
	st.mu.Unlock()
	st.svc.obs.ActionsSent(st.svc.label(st.domain), len(resp.BucketAction))
	return st.srv.Send(resp)
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
