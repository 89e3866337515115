package server

import (
	"context"
	"fmt"
	"sync"
)

// openOps starts the operators' parts: the top identifiers' clock and
// log, and the admin TLS certificates' reloads.
func (s *Server) openOps() error {
	if s.top != nil {
		ctx, stop := context.WithCancel(s.life)
		var wg sync.WaitGroup
		wg.Go(func() { s.top.Run(ctx) })
		s.stopTop = func() { stop(); wg.Wait() }
	}
	if s.adminCerts != nil {
		if err := s.adminCerts.Open(s.life); err != nil {
			return fmt.Errorf("admin tls: %w", err)
		}
	}
	return nil
}

// closeOps stops what openOps started.
func (s *Server) closeOps() {
	if s.stopTop != nil {
		s.stopTop()
	}
	if s.adminCerts != nil {
		_ = s.adminCerts.Close()
	}
}
