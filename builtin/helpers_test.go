package builtin

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// The typed built-ins as the registry holds them.
var (
	primesJob = jobs.Typed(primesType, primes{})
	piJob     = jobs.Typed(piType, pi{})
)

func decodePrimesShard(b []byte) (primesShard, error) {
	return jobs.DecodeShard[primesShard](primesType, b)
}
func decodePiShard(b []byte) (piShard, error) { return jobs.DecodeShard[piShard](piType, b) }

// checkParamsFuzz is the body of the parameter fuzz targets: jobstest.CheckParams (Validate never
// panics, and parameters it accepts are accepted by NewAggregate), and for jobs that need no
// storage, Split accepts them too.
func checkParamsFuzz(t *testing.T, j jobs.Job, params []byte, split bool) {
	raw := json.RawMessage(params)
	if !jobstest.CheckParams(t, j, params) {
		return
	}
	if split {
		shards, err := j.Split(context.Background(), nil, raw)
		if err != nil {
			t.Fatalf("Split refused what Validate accepted: %v", err)
		}
		if len(shards) == 0 || len(shards) > jobs.MaxShards {
			t.Fatalf("Split returned %d shards", len(shards))
		}
	}
}

// splitIsCheap reports whether a Split of these parameters is small enough to run in a fuzz
// iteration.
func splitIsCheap(params []byte) bool {
	var v struct {
		Shards int `json:"shards"`
	}
	_ = json.Unmarshal(params, &v)
	return v.Shards <= 1000
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
