package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
)

// Paging through more jobs than one read batch: every job once, newest first, and the last
// page says there is no next one.
func TestClient_Query_PagesThroughMany(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e.cl.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	const n = 45
	var ids []string
	for range n {
		id, err := e.cl.Submit(ctx, "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var seen []string
	before := ""
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("paging does not end")
		}
		p, err := e.cl.Query(ctx, client.Filter{Limit: 20, Before: before})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Jobs {
			seen = append(seen, s.ID)
		}
		if p.Next == "" {
			break
		}
		if len(p.Jobs) != 20 || p.Next != p.Jobs[len(p.Jobs)-1].ID {
			t.Fatalf("page of %d jobs, next %q", len(p.Jobs), p.Next)
		}
		before = p.Next
	}
	if len(seen) != n {
		t.Fatalf("listed %d jobs, want %d", len(seen), n)
	}
	for i, id := range seen {
		if id != ids[n-1-i] {
			t.Fatalf("job %d listed is %s, want %s (newest first)", i, id, ids[n-1-i])
		}
	}
}
