package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/queue"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestQueue_ReceiveDeleteRedeliver(t *testing.T) {
	ctx := context.Background()
	q, err := queue.New(testenv.Azurite(t), testenv.Name(t, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	for _, s := range []string{"job-a", "job-b"} {
		if err := q.Enqueue(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := q.Receive(ctx, 32, time.Second)
	if err != nil || len(msgs) != 2 || msgs[0].Text != "job-a" || msgs[0].DequeueCount != 1 {
		t.Fatalf("Receive = %+v, %v", msgs, err)
	}
	if err := q.Delete(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, msgs[0]); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
	// The undeleted message comes back after its visibility timeout, with a higher dequeue count.
	var again []queue.Message
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() bool {
		again, err = q.Receive(ctx, 32, 30*time.Second)
		return err == nil && len(again) == 1
	}, "undeleted message not redelivered (err %v)", err)
	if again[0].Text != "job-b" || again[0].DequeueCount != 2 {
		t.Fatalf("redelivered = %+v", again[0])
	}
}

// Extend keeps a received message hidden past its first visibility timeout; the new pop receipt
// deletes it.
func TestQueue_ExtendKeepsHidden(t *testing.T) {
	ctx := context.Background()
	q, err := queue.New(testenv.Azurite(t), testenv.Name(t, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(ctx, "job-x"); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1, time.Second)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Receive = %+v, %v", msgs, err)
	}
	m, err := q.Extend(ctx, msgs[0], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // past the first timeout
	if again, err := q.Receive(ctx, 1, time.Second); err != nil || len(again) != 0 {
		t.Fatalf("an extended message came back: %+v, %v", again, err)
	}
	if err := q.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Depth(ctx); err != nil || n != 0 {
		t.Fatalf("depth %d, %v after deleting with the new receipt", n, err)
	}
}

// A queue deleted under the cluster (a wiped account) is created again by the next operation,
// and the rebuild is reported.
func TestQueue_RecreatedWhenMissing(t *testing.T) {
	ctx := context.Background()
	conn := testenv.Azurite(t)
	name := testenv.Name(t, "q")
	q, err := queue.New(conn, name)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	q.OnRebuilt(func(queue, op string) { ops = append(ops, op) })
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	sc, err := azqueue.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.DeleteQueue(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	if msgs, err := q.Receive(ctx, 1, time.Second); err != nil || len(msgs) != 0 {
		t.Fatalf("Receive from a deleted queue = %v, %v", msgs, err)
	}
	if err := q.Enqueue(ctx, "job-a"); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Depth(ctx); err != nil || n != 1 {
		t.Fatalf("Depth = %d, %v", n, err)
	}
	if len(ops) != 1 || ops[0] != "receive" {
		t.Fatalf("rebuilds reported %q, want [receive]", ops)
	}
}
