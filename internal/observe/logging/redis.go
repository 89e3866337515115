package logging

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// SetRedisLogger sends go-redis' own log lines (failed dials, a sentinel's
// new master) to log at warn level, at most 5 a second and every 1000th
// beyond, rather than to stderr: a dead node makes one per failed dial.
// go-redis has one logger per process, so this affects every client.
func SetRedisLogger(log *zap.Logger) {
	log = log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, 5, 1000)
	}))
	redis.SetLogger(clientLogger{log})
}

type clientLogger struct{ log *zap.Logger }

func (l clientLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn("redis client", zap.String("detail", fmt.Sprintf(format, v...)))
}
