package api

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/mapagg/mapagg/internal/protocol"
)

// Role is what a token may do. Each role may do what the roles below it may.
type Role int

// Roles, weakest first.
const (
	// RoleNone is no token: the open reads (jobs, schedules, results).
	RoleNone Role = iota
	// RoleRead reads, the audit trail too.
	RoleRead
	// RoleSubmit submits, cancels and retries jobs, and adds, pauses, resumes and triggers
	// schedules.
	RoleSubmit
	// RoleAdmin also deletes jobs and schedules. The single --api-token-file token is an admin.
	RoleAdmin
)

var roleNames = []string{"none", "read", "submit", "admin"}

func (r Role) String() string {
	if r < 0 || int(r) >= len(roleNames) {
		return fmt.Sprintf("Role(%d)", int(r))
	}
	return roleNames[r]
}

// ParseRole reads a role's name: read, submit or admin.
func ParseRole(s string) (Role, error) {
	for i, n := range roleNames[1:] {
		if s == n {
			return Role(i + 1), nil
		}
	}
	return RoleNone, fmt.Errorf("role %q: use read, submit or admin", clip(s))
}

// Token is one named bearer token and its role.
type Token struct {
	Name   string
	Role   Role
	Secret []byte
}

// AdminTokenName names the single token of --api-token-file in the audit trail.
const AdminTokenName = "api-token"

// DashboardActor names a dashboard action taken without a token (--dashboard-cancel).
const DashboardActor = "dashboard"

// MinTokenLen is the shortest secret accepted: a guessable token is no token.
const MinTokenLen = 16

// ErrBadTokens is matched by every error of ParseTokens.
var ErrBadTokens = errors.New("bad API tokens file")

// ParseTokens reads a tokens file: one `NAME ROLE TOKEN` a line, fields split by white space;
// blank lines and lines starting with # are skipped. A name is 1–64 characters of a-z, A-Z,
// 0-9, '-', '_' and '.'; names and secrets are unique; a secret is at least MinTokenLen
// characters. Errors name the line, never the secret.
func ParseTokens(r io.Reader) ([]Token, error) {
	var out []Token
	names, secrets := map[string]int{}, map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 3 {
			return nil, fmt.Errorf("%w: line %d has %d fields: want NAME ROLE TOKEN", ErrBadTokens, line, len(f))
		}
		if err := checkTokenName(f[0]); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadTokens, line, err)
		}
		role, err := ParseRole(f[1])
		if err != nil {
			return nil, fmt.Errorf("%w: line %d (%s): %v", ErrBadTokens, line, f[0], err)
		}
		if len(f[2]) < MinTokenLen {
			return nil, fmt.Errorf("%w: line %d (%s): the token is %d characters; use at least %d (openssl rand -hex 32)", ErrBadTokens, line, f[0], len(f[2]), MinTokenLen)
		}
		if prev, dup := names[f[0]]; dup {
			return nil, fmt.Errorf("%w: line %d: name %q is on line %d too", ErrBadTokens, line, f[0], prev)
		}
		if prev, dup := secrets[f[2]]; dup {
			return nil, fmt.Errorf("%w: line %d (%s): the same token as line %d: give each name its own", ErrBadTokens, line, f[0], prev)
		}
		names[f[0]], secrets[f[2]] = line, line
		out = append(out, Token{Name: f[0], Role: role, Secret: []byte(f[2])})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: line %d: %v", ErrBadTokens, line+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no tokens (one `NAME ROLE TOKEN` a line)", ErrBadTokens)
	}
	return out, nil
}

func checkTokenName(n string) error {
	if n == "" || len(n) > 64 {
		return fmt.Errorf("token name %q: use 1 to 64 characters", clip(n))
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("token name %q: only a-z, A-Z, 0-9, '-', '_' and '.'", clip(n))
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:39] + "…"
	}
	return s
}

// tokens is every token the server accepts: Config.Tokens, and Config.Token as an admin.
func (s *Server) tokens() []Token {
	if len(s.cfg.Token) == 0 {
		return s.cfg.Tokens
	}
	return append([]Token{{Name: AdminTokenName, Role: RoleAdmin, Secret: s.cfg.Token}}, s.cfg.Tokens...)
}

// neededRole is the role a route needs, by its mux pattern. Writes not named here need submit.
func neededRole(pattern string) Role {
	switch pattern {
	case "DELETE " + Prefix + "/jobs/{id}", "DELETE " + Prefix + "/schedules/{name}", "POST /api/jobs/{id}/delete":
		return RoleAdmin
	case "GET " + Prefix + "/audit", "GET " + Prefix + "/whoami":
		return RoleRead
	}
	return RoleSubmit
}

// authorized checks the bearer token of a write against the role its route needs (neededRole),
// answering 401 for a missing or unknown token and 403 for a role too weak.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	_, ok := s.authorize(w, r, neededRole(r.Pattern))
	return ok
}

// authorize checks r's bearer token for need; on success the token is the request's actor in
// the audit trail.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, need Role) (Token, bool) {
	toks := s.tokens()
	if len(toks) == 0 {
		writeErr(w, http.StatusForbidden, "writes are disabled on this worker: start it with --api-token-file FILE (env API_TOKEN_FILE) "+
			"or --api-tokens-file FILE (env API_TOKENS_FILE), and send the header Authorization: Bearer <token>")
		return Token{}, false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mapagg"`)
		writeErr(w, http.StatusUnauthorized, "this request needs a token: send the header Authorization: Bearer <token>, a token of the worker's --api-token-file or --api-tokens-file")
		return Token{}, false
	}
	tok, found := matchToken(toks, strings.TrimSpace(got))
	if !found {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mapagg", error="invalid_token"`)
		writeErr(w, http.StatusUnauthorized, "the bearer token does not match the worker's --api-token-file or any token of its --api-tokens-file")
		return Token{}, false
	}
	if tok.Role < need {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mapagg", error="insufficient_scope"`)
		writeErr(w, http.StatusForbidden, fmt.Sprintf("token %q has role %s; %s needs role %s", tok.Name, tok.Role, routeName(r), need))
		return Token{}, false
	}
	actorOf(r).set(tok.Name, tok.Role, r.Pattern)
	return tok, true
}

func routeName(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " " + protocol.Clip(r.URL.Path, 80)
}

// matchToken finds got among toks, comparing every secret in constant time (hashed first, which
// hides their lengths too).
func matchToken(toks []Token, got string) (Token, bool) {
	g := sha256.Sum256([]byte(got))
	var found Token
	ok := false
	for _, t := range toks {
		h := sha256.Sum256(t.Secret)
		if subtle.ConstantTimeCompare(g[:], h[:]) == 1 && !ok {
			found, ok = t, true
		}
	}
	return found, ok
}

// dashboardAllowed checks a dashboard action: it needs a token of the route's role, or
// --dashboard-cancel and a request from the dashboard's own page (a page on another site cannot
// forge that).
func (s *Server) dashboardAllowed(w http.ResponseWriter, r *http.Request, what string) bool {
	_, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case bearer:
		return s.authorized(w, r)
	case !s.cfg.DashboardCancel:
		writeErr(w, http.StatusForbidden, what+" needs an API token (--api-token-file, --api-tokens-file) or a worker started with --dashboard-cancel")
		return false
	case !sameOrigin(r):
		writeErr(w, http.StatusForbidden, what+" refused: the request does not come from this dashboard's own page (no same-origin Origin or Sec-Fetch-Site header); use the API token instead")
		return false
	}
	actorOf(r).set(DashboardActor, RoleNone, r.Pattern)
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
