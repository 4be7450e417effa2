package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
)

// authorized checks the bearer token of a write, answering 401 or 403 when it fails.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if len(s.cfg.Token) == 0 {
		writeErr(w, http.StatusForbidden, "writes are disabled on this worker: start it with --api-token-file FILE (env API_TOKEN_FILE), "+
			"FILE holding a secret token, and send the header Authorization: Bearer <token>")
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mapagg"`)
		writeErr(w, http.StatusUnauthorized, "this request changes state: send the header Authorization: Bearer <token>, the token in the worker's --api-token-file")
		return false
	}
	if !s.tokenMatches(strings.TrimSpace(got)) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mapagg", error="invalid_token"`)
		writeErr(w, http.StatusUnauthorized, "the bearer token does not match the one in the worker's --api-token-file (API_TOKEN_FILE)")
		return false
	}
	return true
}

// tokenMatches compares in constant time; hashing first hides the token's length too.
func (s *Server) tokenMatches(got string) bool {
	if len(s.cfg.Token) == 0 {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256(s.cfg.Token)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// dashboardAllowed checks a dashboard action: it needs the API token, or --dashboard-cancel and
// a request from the dashboard's own page (a page on another site cannot forge that).
func (s *Server) dashboardAllowed(w http.ResponseWriter, r *http.Request, what string) bool {
	_, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case bearer:
		return s.authorized(w, r)
	case !s.cfg.DashboardCancel:
		writeErr(w, http.StatusForbidden, what+" needs the API token (--api-token-file) or a worker started with --dashboard-cancel")
		return false
	case !sameOrigin(r):
		writeErr(w, http.StatusForbidden, what+" refused: the request does not come from this dashboard's own page (no same-origin Origin or Sec-Fetch-Site header); use the API token instead")
		return false
	}
	return true
}

// sameOrigin reports whether a browser says the request comes from a page of this server.
func sameOrigin(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") == "same-origin" {
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return false
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}
