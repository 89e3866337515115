package tracing

import "go.opentelemetry.io/otel/trace"

// Tracer is the tracer of the process's spans, for the parts that make
// their own (the quota service's reports); nil with tracing off.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}
