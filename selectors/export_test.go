package selectors

// Fallbacks returns how many batches a selector returned by Open for a
// plugin has chosen by the round-robin fallback; -1 for other selectors.
func Fallbacks(s Selector) int64 {
	if r, ok := s.(*remote); ok {
		return r.fallbacks.Load()
	}
	return -1
}
