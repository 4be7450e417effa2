package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Wait learns of a job's end from the leader's job_finished event, not at its next poll; an
// event is only a hint: one that names the job before its status says it ended, or names
// another job, does not end the wait.
func TestWait_WokenByTheJobFinishedEvent(t *testing.T) {
	ctx := context.Background()
	conn := testenv.Azurite(t)
	url := testenv.NATS(t)
	const prefix = "endwatch"
	cfg := client.Config{Storage: store.Account{ConnectionString: conn}, JobsContainer: testenv.Name(t, "jobs"), Queue: testenv.Name(t, "q"),
		Registry: builtin.Registry(), NATSURL: url, StreamPrefix: prefix}
	e := newEnvNamed(t, conn, cfg.JobsContainer, cfg.Queue)
	cl, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id, err := cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":10,"shards":1}`))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	announce := func(job string) {
		t.Helper()
		ev := membership.Event{Seq: 1, At: time.Now(), Worker: "w1", Kind: string(coordinator.EventJobFinished), Job: job, State: string(jobs.StateSucceeded)}
		data, err := ev.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(protocol.NewNames(prefix).Events(), data); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	type waited struct {
		st  *client.Status
		err error
	}
	done := make(chan waited, 1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		st, err := cl.Wait(wctx, id, time.Hour, nil) // polls once, then only an event wakes it
		done <- waited{st, err}
	}()
	time.Sleep(500 * time.Millisecond) // the first status read is done and the watch is on

	announce("20260101-000000-00000000") // another job
	announce(id)                         // this job, but its status still says queued
	select {
	case w := <-done:
		t.Fatalf("Wait returned on an event its status does not bear out: %+v, %v", w.st, w.err)
	case <-time.After(time.Second):
	}

	e.putCheckpoint(t, id, jobs.StateSucceeded, 1, 1, `{"count":4}`, "")
	announce(id)
	select {
	case w := <-done:
		if w.err != nil || w.st.State != jobs.StateSucceeded {
			t.Fatalf("Wait = %+v, %v; want succeeded", w.st, w.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not wake on the job_finished event (it polls every hour)")
	}
}
