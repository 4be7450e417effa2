package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/audit"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/store"
)

const (
	readTok   = "read-token-0123456789"
	submitTok = "submit-token-0123456789"
	adminTok  = "admin-token-0123456789"
)

// newRolesEnv serves the API with three named tokens, the single token and an audit trail in
// the jobs container.
func newRolesEnv(t *testing.T) (*apiEnv, *audit.Log) {
	t.Helper()
	toks, err := ParseTokens(strings.NewReader("# name role token\nviewer read " + readTok + "\n\nci submit " + submitTok + "\nops admin " + adminTok + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := newAPIEnv(t, Config{})
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	trail := audit.NewLog(bc, e.jobs.Name())
	s, err := New(Config{Jobs: e.cl, Schedules: e.cl, Token: []byte(testToken), Tokens: toks, Audit: trail, DashboardCancel: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Close()
	e.srv = httptest.NewServer(s)
	t.Cleanup(e.srv.Close)
	return e, trail
}

func TestAPI_Roles(t *testing.T) {
	e, _ := newRolesEnv(t)
	submit := `{"type":"primes","params":{"from":0,"to":100,"shards":1}}`
	if code, body := e.do(t, "POST", "/api/v1/jobs", readTok, submit); code != 403 || !strings.Contains(body, `token \"viewer\" has role read`) || !strings.Contains(body, "needs role submit") {
		t.Fatalf("read token submits: %d %s; want 403 naming the role", code, body)
	}
	if blobs, queued := e.written(t); blobs != 0 || queued != 0 {
		t.Fatalf("a refused submit wrote %d blobs, queued %d", blobs, queued)
	}
	code, body := e.do(t, "POST", "/api/v1/jobs", submitTok, submit)
	var sub struct{ ID string }
	if code != 201 || json.Unmarshal([]byte(body), &sub) != nil {
		t.Fatalf("submit token submits: %d %s", code, body)
	}
	if code, body := e.do(t, "POST", "/api/v1/jobs/"+sub.ID+"/cancel", submitTok, ""); code != 202 {
		t.Fatalf("submit token cancels: %d %s", code, body)
	}
	if code, body := e.do(t, "DELETE", "/api/v1/jobs/"+sub.ID, submitTok, ""); code != 403 || !strings.Contains(body, "needs role admin") {
		t.Fatalf("submit token deletes: %d %s; want 403", code, body)
	}
	if code, body := e.do(t, "POST", "/api/jobs/"+sub.ID+"/delete", submitTok, ""); code != 403 {
		t.Fatalf("submit token deletes from the dashboard: %d %s; want 403", code, body)
	}
	if code, body := e.do(t, "DELETE", "/api/v1/schedules/nightly", submitTok, ""); code != 403 {
		t.Fatalf("submit token deletes a schedule: %d %s; want 403", code, body)
	}
	if code, body := e.do(t, "POST", "/api/v1/jobs", "not-a-token-at-all-x", submit); code != 401 {
		t.Fatalf("unknown token: %d %s; want 401", code, body)
	}
	// Reads stay open; whoami says what a token may do.
	if code, _ := e.do(t, "GET", "/api/v1/jobs/"+sub.ID, "", ""); code != 200 {
		t.Fatalf("open read: %d", code)
	}
	for tok, want := range map[string]string{readTok: `{"name":"viewer","role":"read","may":[]}`,
		submitTok: `{"name":"ci","role":"submit","may":["submit","cancel","retry","schedule"]}`,
		testToken: `{"name":"api-token","role":"admin","may":["submit","cancel","retry","schedule","delete","schedule.delete"]}`} {
		if code, body := e.do(t, "GET", "/api/v1/whoami", tok, ""); code != 200 || strings.TrimSpace(body) != want {
			t.Errorf("whoami = %d %s; want %s", code, body, want)
		}
	}
	if code, _ := e.do(t, "GET", "/api/v1/whoami", "", ""); code != 401 {
		t.Errorf("whoami without a token = %d; want 401", code)
	}
}

func TestAPI_AuditTrail(t *testing.T) {
	e, trail := newRolesEnv(t)
	submit := `{"type":"primes","params":{"from":0,"to":100,"shards":1}}`
	var ids []string
	for _, tok := range []string{submitTok, testToken} {
		code, body := e.do(t, "POST", "/api/v1/jobs", tok, submit)
		var sub struct{ ID string }
		if code != 201 || json.Unmarshal([]byte(body), &sub) != nil {
			t.Fatalf("submit: %d %s", code, body)
		}
		ids = append(ids, sub.ID)
	}
	e.do(t, "POST", "/api/v1/jobs/"+ids[0]+"/cancel", submitTok, "")
	e.do(t, "POST", "/api/jobs/"+ids[1]+"/cancel", "", "", "Sec-Fetch-Site", "same-origin")
	e.do(t, "DELETE", "/api/v1/jobs/"+ids[0], submitTok, "")     // refused: not recorded
	e.do(t, "POST", "/api/v1/jobs", adminTok, `{"type":"nope"}`) // refused: not recorded
	if code, body := e.do(t, "GET", "/api/v1/audit", "", ""); code != 401 {
		t.Fatalf("audit without a token: %d %s", code, body)
	}
	code, body := e.do(t, "GET", "/api/v1/audit", readTok, "")
	var page audit.Page
	if code != 200 || json.Unmarshal([]byte(body), &page) != nil {
		t.Fatalf("audit: %d %s", code, body)
	}
	var got []string
	for _, en := range page.Entries {
		got = append(got, en.Actor+" "+en.Action+" "+en.Job)
	}
	want := []string{"dashboard job.cancel " + ids[1], "ci job.cancel " + ids[0], "api-token job.submit " + ids[1], "ci job.submit " + ids[0]}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit entries, newest first:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if en := page.Entries[1]; en.Role != "submit" || en.Status != 202 || en.At.IsZero() || en.Remote == "" {
		t.Errorf("entry %+v: want role, status, time and remote", en)
	}
	// Paging and filters.
	p1, err := trail.List(t.Context(), audit.Filter{Limit: 1})
	if err != nil || len(p1.Entries) != 1 || p1.Next == "" {
		t.Fatalf("first page: %+v, %v", p1, err)
	}
	p2, err := trail.List(t.Context(), audit.Filter{Limit: 10, Before: p1.Next})
	if err != nil || len(p2.Entries) != 3 || p2.Entries[0].ID == p1.Entries[0].ID {
		t.Fatalf("second page: %+v, %v", p2, err)
	}
	if p, err := trail.List(t.Context(), audit.Filter{Job: ids[0]}); err != nil || len(p.Entries) != 2 {
		t.Fatalf("filter by job: %+v, %v", p, err)
	}
	if _, err := trail.List(t.Context(), audit.Filter{Before: "../x"}); !errors.Is(err, client.ErrBadSpec) {
		t.Fatalf("bad cursor: %v", err)
	}
	if code, _ := e.do(t, "GET", "/api/v1/audit?limit=0", readTok, ""); code != 400 {
		t.Fatalf("limit=0: %d; want 400", code)
	}
	// The trail does not show up as a job.
	if code, body := e.do(t, "GET", "/api/v1/jobs", "", ""); code != 200 || strings.Contains(body, "audit") {
		t.Fatalf("job list: %d %s", code, body)
	}
}

func TestParseTokens_Refusals(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "no tokens"},
		{"a read", "2 fields"},
		{"a reader 0123456789abcdef", `role "reader"`},
		{"a read short", "at least 16"},
		{"a/b read 0123456789abcdef", "token name"},
		{"a read 0123456789abcdef\na admin 0123456789abcdeg", "line 2: name \"a\" is on line 1"},
		{"a read 0123456789abcdef\nb admin 0123456789abcdef", "the same token as line 1"},
	} {
		_, err := ParseTokens(strings.NewReader(tt.in))
		if !errors.Is(err, ErrBadTokens) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseTokens(%q) = %v; want %q", tt.in, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcde") {
			t.Errorf("ParseTokens(%q): the error shows a secret: %v", tt.in, err)
		}
	}
}

func FuzzParseTokens(f *testing.F) {
	f.Add("ci submit 0123456789abcdef\n# c\nops admin fedcba9876543210\n")
	f.Add("a read x")
	f.Fuzz(func(t *testing.T, in string) {
		toks, err := ParseTokens(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, tok := range toks {
			if checkTokenName(tok.Name) != nil || tok.Role < RoleRead || tok.Role > RoleAdmin || len(tok.Secret) < MinTokenLen {
				t.Fatalf("accepted %+v", tok)
			}
		}
	})
}
