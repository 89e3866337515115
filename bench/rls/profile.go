package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// startProfile starts a CPU profile of srv for the measured phase of a
// run, when --profile asks and srv serves pprof, and returns the function
// that waits for it and writes it to --profile's directory.
func (b *bench) startProfile(ctx context.Context, srv *server, spec runSpec, round int) func() error {
	if b.o.profile == "" || srv.admin == "" {
		return func() error { return nil }
	}
	name := strings.NewReplacer(" ", "-", "/", "-").Replace(fmt.Sprintf("%s-%s-r%d.pprof", spec.short(), srv.bin.name, round+1))
	path := filepath.Join(b.o.profile, name)
	secs := int(math.Ceil(b.o.duration.Seconds()))
	done := make(chan error, 1)
	go func() {
		done <- fetchProfile(ctx, "http://"+srv.admin+fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), path,
			time.Duration(secs)*time.Second+30*time.Second)
	}()
	return func() error {
		if err := <-done; err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
		return nil
	}
}

// fetchProfile writes what url answers to path.
func fetchProfile(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
