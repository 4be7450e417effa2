package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// A job over an input container the account lacks is refused at submit, naming the container,
// and nothing is written; one over a container that exists is accepted.
func TestClient_Submit_MissingInputContainerRefused(t *testing.T) {
	conn := testenv.Azurite(t)
	e := newEnvNamed(t, conn, testenv.Name(t, "jobs"), testenv.Name(t, "q"))
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	e.cl.Containers = store.NewEnv(bc)
	ctx := context.Background()
	missing := testenv.Name(t, "nope")
	_, err = e.cl.Submit(ctx, "wordcount", json.RawMessage(`{"container":"`+missing+`","top":3}`))
	var pe *jobs.ParamError
	if !errors.Is(err, client.ErrNoSuchContainer) || !client.Refused(err) || !errors.As(err, &pe) || pe.Field != "container" ||
		!strings.Contains(err.Error(), `input container "`+missing+`" does not exist`) {
		t.Fatalf("Submit over a missing container = %v; want ErrNoSuchContainer, refused, field container, naming %s", err, missing)
	}
	e.assertNothingWritten(t)

	// Retry checks it again: the input may have gone since.
	in := testenv.Name(t, "in")
	c := store.New(bc, in)
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := e.cl.Submit(ctx, "wordcount", json.RawMessage(`{"container":"`+in+`","top":3}`))
	if err != nil {
		t.Fatalf("Submit over an existing container: %v", err)
	}
	e.putCheckpoint(t, id, jobs.StateFailed, 0, 1, "", "boom")
	if _, err := bc.ServiceClient().NewContainerClient(in).Delete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cl.Retry(ctx, id); !errors.Is(err, client.ErrNoSuchContainer) || !strings.Contains(err.Error(), in) {
		t.Fatalf("Retry over a deleted container = %v; want ErrNoSuchContainer naming %s", err, in)
	}

	// Without Containers (a client built by hand), or for parameters with no container, nothing is
	// checked here: the leader's split says what is wrong.
	e.cl.Containers = nil
	if _, err := e.cl.Submit(ctx, "wordcount", json.RawMessage(`{"container":"`+missing+`"}`)); err != nil {
		t.Fatalf("Submit without Containers: %v", err)
	}
}
