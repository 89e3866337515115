package tracing

import (
	"context"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// tracedStore makes a span of each store call within a sampled trace;
// other calls pass through.
type tracedStore struct {
	limiter.Store
	tracer trace.Tracer
	kind   string // redis or memory
}

// tracedAllOrNothingStore keeps TakeAll visible to the limiter.
type tracedAllOrNothingStore struct {
	*tracedStore
	all limiter.AllOrNothingStore
}

// Store returns st traced; kind ("redis", "memory") names it in spans. A
// nil t returns st itself.
func (t *Tracing) Store(st limiter.Store, kind string) limiter.Store {
	if t == nil {
		return st
	}
	ts := &tracedStore{Store: st, tracer: t.tracer, kind: kind}
	if all, ok := st.(limiter.AllOrNothingStore); ok {
		return &tracedAllOrNothingStore{tracedStore: ts, all: all}
	}
	return ts
}

func (s *tracedStore) Take(ctx context.Context, ops []limiter.Op, res []limiter.Result) error {
	return s.traced(ctx, "store.take", s.Store.Take, ops, res)
}

func (s *tracedAllOrNothingStore) TakeAll(ctx context.Context, ops []limiter.Op, res []limiter.Result) error {
	return s.traced(ctx, "store.take_all", s.all.TakeAll, ops, res)
}

func (s *tracedStore) traced(ctx context.Context, name string,
	call func(context.Context, []limiter.Op, []limiter.Result) error, ops []limiter.Op, res []limiter.Result) error {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return call(ctx, ops, res)
	}
	ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrStore.String(s.kind), attrKeys.Int(len(ops))))
	defer span.End()
	err := call(ctx, ops, res)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
		return err
	}
	denied := 0
	for i := range res {
		if !res[i].Allowed {
			denied++
		}
	}
	span.SetAttributes(attrDenied.Int(denied))
	return nil
}
