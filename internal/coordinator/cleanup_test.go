package coordinator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// A job this term planned lists its partials folder at clean-up only when a result named a large
// partial: its partial blobs are deleted, and the result is still dropped from the final
// checkpoint without a read of it.
func TestCleanup_LargePartialsDeleted(t *testing.T) {
	r := newRig(t)
	r.leadWith(1, func(c *Config) { c.KeepResultMax = -1 })            // every result is dropped
	r.work(worker.Config{Concurrency: 2, InlinePartialLimit: 1 << 10}) // partials over 1 KiB go to blobs
	ctx := context.Background()
	data := store.New(r.blob, testenv.Name(t, "words"))
	if err := data.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&text, "word%d ", i) // a vocabulary of thousands: partials of kilobytes
	}
	if _, err := data.Put(ctx, "in/a.txt", []byte(text.String()), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	params := fmt.Sprintf(`{"container":%q,"prefix":"in/","top":5,"shard_bytes":8192}`, data.Name())
	id := r.submit("wordcount", params)
	st := r.wait(id, 60*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, sequential(t, store.NewEnv(r.blob), "wordcount", params))
	eventually(t, 10*time.Second, "partials deleted and the result dropped from the checkpoint", func() bool {
		parts, err := r.st.List(ctx, protocol.PartialsPrefix(id))
		if err != nil || len(parts) != 0 {
			return false
		}
		data, _, err := r.st.Get(ctx, protocol.CheckpointBlob(id))
		cp, derr := protocol.DecodeCheckpoint(data)
		return err == nil && derr == nil && cp.ResultStored && len(cp.Result) == 0
	})
	// The client reads the checkpoint first, and then the copy it names.
	res, err := r.cl.Result(ctx, id)
	if err != nil {
		t.Fatalf("result after the copy: %v", err)
	}
	sameJSON(t, res, st.Result)
}
