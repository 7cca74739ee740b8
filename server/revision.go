package server

// GlobalRevision is the revision of the cluster state that the globalv1
// Watch service serves (what its Sync operations carry, and what a client
// sends back in its next request), or 0 before a globalv1 client asked for
// it: the reference of a globalv1 agent's revision lag.
func (s *Server) GlobalRevision() uint64 {
	s.mu.Lock()
	c := s.cluster
	s.mu.Unlock()
	if c == nil {
		return 0
	}
	c.j.mu.RLock()
	defer c.j.mu.RUnlock()
	return c.j.rev
}
