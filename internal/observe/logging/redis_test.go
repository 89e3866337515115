package logging_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/internal/observe/logging"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/pkg/store"
)

const secret = "Sup3r-s3cret-pw"

func TestSetRedisLogger(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	detach := logging.SetRedisLogger(zap.New(core))
	defer detach()
	closedAddr := loopback.Addr(t)
	c, err := store.NewClient(store.ClientOptions{URL: closedAddr, Password: secret,
		Conn: store.ConnOptions{DialTimeout: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for ctx.Err() == nil {
		_ = c.Ping(ctx).Err()
	}
	if n := logs.FilterMessage("redis client").Len(); n == 0 || n > 10 {
		t.Errorf("%d go-redis lines logged in a second of failed dials, want 1 to 10 (sampled)", n)
	}
	for _, e := range logs.All() {
		if strings.Contains(e.ContextMap()["detail"].(string), secret) {
			t.Errorf("log shows the password: %v", e.ContextMap())
		}
	}
	// Detached, the logger gets nothing more, though dials go on failing
	// (a server's test logger must not be written after its test).
	detach()
	before := logs.Len()
	ctx, cancel = context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	for ctx.Err() == nil {
		_ = c.Ping(ctx).Err()
	}
	if n := logs.Len() - before; n != 0 {
		t.Errorf("%d go-redis lines logged after detach, want 0", n)
	}
}
