package store

import (
	"context"
	"strconv"
	"strings"
)

// Expiries lists the state under prefix as Redis would name it, for
// limitertest.Inspector: window counters as base + start/1000, buckets as
// base + "tokens", with their expiry in Unix ms.
func (m *Memory) Expiries(_ context.Context, prefix string, after int64) (map[string]int64, error) {
	out := make(map[string]int64)
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for k, c := range s.windows {
			if strings.HasPrefix(k.base, prefix) && c.expireAt > after {
				out[k.base+strconv.FormatInt(k.start/1000, 10)] = c.expireAt
			}
		}
		for k, b := range s.buckets {
			if strings.HasPrefix(k, prefix) && b.expireAt > after {
				out[k+"tokens"] = b.expireAt
			}
		}
		s.mu.Unlock()
	}
	return out, nil
}
