package rlqs

import (
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A refusal of a new bucket, indexing report.refused.
const (
	refusedStream = iota
	refusedServer
	refusedID
)

var refusedReasons = [...]string{RefusedStream, RefusedServer, RefusedID}

// validID reports whether a bucket id is within Options.IDLimits.
func (s *Service) validID(id map[string]string) bool {
	lim := s.opts.IDLimits
	if lim.MaxEntries > 0 && len(id) > lim.MaxEntries {
		return false
	}
	if lim.MaxEntryBytes > 0 {
		for k, v := range id {
			if len(k) > lim.MaxEntryBytes || len(v) > lim.MaxEntryBytes {
				return false
			}
		}
	}
	return true
}

// admit reserves room for a new bucket of st, or says which bound it
// would pass; the handler goroutine calls it, and st.add must follow.
func (st *stream) admit() (int, bool) {
	s := st.svc
	if len(st.buckets) >= s.opts.MaxBucketsPerStream {
		return refusedStream, false
	}
	if s.held.Add(1) > int64(s.opts.MaxBuckets) {
		s.held.Add(-1)
		return refusedServer, false
	}
	return 0, true
}

// noteRefused counts the report's refused buckets and logs them, at most
// one line a second for the service.
func (st *stream) noteRefused(r *report) {
	s := st.svc
	total := 0
	for why, n := range r.refused {
		if n > 0 {
			s.obs.BucketsRefused(s.label(st.domain), refusedReasons[why], n)
			total += n
		}
	}
	if total == 0 || !logDue(&s.bucketsRefusedAt) {
		return
	}
	s.log.Warn("RLQS buckets refused: no assignment, Envoy's no_assignment_behavior applies (--rlqs-max-buckets-per-stream, --rlqs-max-buckets, --max-entries, --max-entry-bytes)",
		zap.String("stream", st.id), zap.String("peer", peerOf(st.srv)), zap.String("domain", st.domain),
		zap.Int("per_stream", r.refused[refusedStream]), zap.Int("per_server", r.refused[refusedServer]),
		zap.Int("id", r.refused[refusedID]))
}

// refuseStream refuses a stream past Options.MaxStreams; s.mu is held.
func (s *Service) refuseStream(srv grpcStream) error {
	s.obs.StreamRefused()
	if logDue(&s.streamsRefusedAt) {
		s.log.Warn("RLQS stream refused: --rlqs-max-streams are open", zap.Int("streams", len(s.streams)),
			zap.String("peer", peerOf(srv)))
	}
	return status.Errorf(codes.ResourceExhausted, "%d RLQS streams are open, the most this replica serves", len(s.streams))
}
