package redistest_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// TestServerStopRestart: a stopped server refuses connections; restarted,
// it answers on the same address again, without the old data.
func TestServerStopRestart(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if cpu := redistest.CPU(t, s.Addr); cpu <= 0 {
		t.Errorf("CPU = %v, want some", cpu)
	}
	s.Stop()
	s.Stop() // idempotent
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Restart(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS k after Restart = %d, %v; want 0", n, err)
	}
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if err := rdb.Ping(short).Err(); err == nil {
		t.Error("PING answered while the server was stopped by SIGSTOP")
	}
	if err := s.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after SIGCONT: %v", err)
	}
}
