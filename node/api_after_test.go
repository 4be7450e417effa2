package node

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/observe"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/store"
)

// POST /api/v1/jobs with "after" submits a job that waits, as `submit --after` does; a missing
// predecessor is refused and writes nothing.
func TestJobAPI_SubmitAfter(t *testing.T) {
	conn := testenv.Azurite(t)
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := store.New(bc, testenv.Name(t, "jobs"))
	q, err := queue.New(conn, testenv.Name(t, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	api := jobAPI{&client.Client{Store: st, Queue: q, Registry: builtin.Registry()}}
	params := json.RawMessage(`{"samples":1000,"shards":2}`)
	first, err := api.Submit(ctx, observe.SubmitRequest{Type: "pi", Params: params})
	if err != nil {
		t.Fatal(err)
	}
	second, err := api.Submit(ctx, observe.SubmitRequest{Type: "pi", Params: params, After: []string{first}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.Status(ctx, second)
	if err != nil || len(s.After) != 1 || s.After[0] != first {
		t.Fatalf("status of the job after %s: %+v %v", first, s, err)
	}
	if _, err := api.Submit(ctx, observe.SubmitRequest{Type: "pi", Params: params, After: []string{"20261121-000000-00000000"}}); !errors.Is(err, client.ErrNoSuchJob) {
		t.Fatalf("after a missing job: %v; want ErrNoSuchJob", err)
	}
}
