package server

import "fmt"

// openOps starts the operators' parts: the top identifiers' clock and
// log, and the admin TLS certificates' reloads.
func (s *Server) openOps() error {
	if s.top != nil {
		if err := s.top.Open(s.life); err != nil {
			return fmt.Errorf("top identifiers: %w", err)
		}
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
	if s.top != nil {
		_ = s.top.Close()
	}
	if s.adminCerts != nil {
		_ = s.adminCerts.Close()
	}
}
