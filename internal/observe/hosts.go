package observe

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/mapagg/mapagg/internal/protocol"
)

// checkHost refuses requests whose Host the worker does not serve: a page on an attacker's
// domain that rebinds its name to this address (DNS rebinding) names that domain in Host. The
// probes and /metrics are exempt: scrapers and orchestrators name targets by any DNS name, and
// those endpoints change nothing and hold no job data.
func (s *Server) checkHost(next http.Handler) http.Handler {
	self, _ := os.Hostname()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probe := r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == "/metrics")
		if !probe && !hostAllowed(r.Host, self, s.cfg.Hosts) {
			writeErr(w, http.StatusMisdirectedRequest, fmt.Sprintf("Host %q is not a name this worker serves: reach it by IP address or localhost, "+
				"or add the name to --http-hosts (env HTTP_HOSTS)", protocol.Clip(r.Host, 80)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether host (a Host header) names this worker. It may be an IP literal,
// localhost, a name without a dot (a container or service name, which no outside site controls),
// the machine's host name, or one of extra ("*" for any, ".example.com" for its subdomains).
func hostAllowed(host, self string, extra []string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	switch {
	case h == "":
		return false
	case net.ParseIP(h) != nil, h == "localhost", strings.HasSuffix(h, ".localhost"), !strings.Contains(h, "."):
		return true
	case self != "" && h == strings.ToLower(self):
		return true
	}
	for _, e := range extra {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "*" || e == h || (strings.HasPrefix(e, ".") && strings.HasSuffix(h, e)) {
			return true
		}
	}
	return false
}
