package httpapi

import "net/http"

// handleHealthz answers 200 while the process serves HTTP.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": s.be.Version(), "broker_id": s.config().BrokerID})
}

// ReadyCheck is one condition of /readyz.
type ReadyCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Ready says whether every check passed.
func Ready(checks []ReadyCheck) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// handleReadyz answers 200 when every readiness check passes, 503 with
// the failing ones otherwise.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	checks := s.be.Readiness()
	code, status := http.StatusOK, "ready"
	if !Ready(checks) {
		code, status = http.StatusServiceUnavailable, "not ready"
	}
	WriteJSON(w, code, map[string]any{"status": status, "checks": checks})
}
