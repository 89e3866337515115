package logging

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// SetRedisLogger sends go-redis' own log lines (failed dials, a sentinel's
// new master) to log at warn level, at most 5 a second and every 1000th
// beyond, rather than to stderr: a dead node makes one per failed dial.
// go-redis has one logger per process, so this affects every client.
// detach stops the lines going to log: once it returns none is written
// there, though go-redis may still dial for a closed client (they are
// dropped until the next SetRedisLogger).
func SetRedisLogger(log *zap.Logger) (detach func()) {
	log = log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, 5, 1000)
	}))
	l := &clientLogger{log: log}
	redis.SetLogger(l)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.log = nil
	}
}

type clientLogger struct {
	mu  sync.RWMutex // held to write, so that detach waits for writes under way
	log *zap.Logger  // nil once detached
}

func (l *clientLogger) Printf(_ context.Context, format string, v ...any) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.log != nil {
		l.log.Warn("redis client", zap.String("detail", fmt.Sprintf(format, v...)))
	}
}
