package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

// The range-split built-ins are Indexed, and their plans make exactly Split's shards.
func TestIndexed_PlanIsSplit(t *testing.T) {
	for _, c := range []struct {
		job    jobs.Job
		params string
	}{
		{primesJob, `{"from": 3, "to": 1000, "shards": 7}`},
		{primesJob, `{"from": 0, "to": 10, "shards": 10}`},
		{piJob, `{"samples": 1003, "shards": 10, "seed": 4}`},
		{sleep{}, `{"shards": 300, "duration": "1ms", "fail_rate": 0.3, "seed": 9, "fail_always": [3], "panic_always": [5]}`},
	} {
		ix, ok := c.job.(jobs.Indexed)
		if !ok {
			t.Fatalf("%s is not jobs.Indexed", c.job.Type())
		}
		split, err := c.job.Split(context.Background(), nil, json.RawMessage(c.params))
		if err != nil {
			t.Fatal(err)
		}
		plan, err := ix.Plan(json.RawMessage(c.params))
		if err != nil {
			t.Fatal(err)
		}
		if plan.Len() != len(split) {
			t.Fatalf("%s %s: plan has %d shards, Split %d", c.job.Type(), c.params, plan.Len(), len(split))
		}
		for i := range split {
			b, err := plan.Shard(i)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, split[i]) {
				t.Fatalf("%s %s: shard %d is %s, Split's %s", c.job.Type(), c.params, i, b, split[i])
			}
		}
		for _, i := range []int{-1, plan.Len()} {
			if _, err := plan.Shard(i); err == nil {
				t.Errorf("%s: shard %d of %d accepted", c.job.Type(), i, plan.Len())
			}
		}
		if _, err := ix.Plan(json.RawMessage(`{"shards": -1}`)); err == nil {
			t.Errorf("%s: plan of bad parameters accepted", c.job.Type())
		}
	}
	if _, ok := any(wordcount{}).(jobs.Indexed); ok {
		t.Error("wordcount lists storage: its plan must be stored, not indexed")
	}
}
