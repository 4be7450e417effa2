package protocol

import (
	"fmt"
	"strings"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

// Ended markers: ended/<finished time>-<state>-<job-id>, written when a job ends, so retention
// finds the oldest finished jobs by listing one prefix in time order, never every job.
const EndedPrefix = "ended/"

const endedLayout = "20060102T150405Z"

// EndedBlob names the ended marker of job id, finished at at in state.
func EndedBlob(id string, state jobs.State, at time.Time) string {
	return EndedPrefix + at.UTC().Format(endedLayout) + "-" + string(state) + "-" + id
}

// ParseEndedBlob reads an ended marker's name.
func ParseEndedBlob(name string) (id string, state jobs.State, at time.Time, err error) {
	rest, ok := strings.CutPrefix(name, EndedPrefix)
	if !ok || len(rest) < len(endedLayout)+3 || rest[len(endedLayout)] != '-' {
		return "", "", time.Time{}, fmt.Errorf("ended marker %q: malformed", Clip(name, 64))
	}
	if at, err = time.Parse(endedLayout, rest[:len(endedLayout)]); err != nil {
		return "", "", time.Time{}, fmt.Errorf("ended marker %q: %v", Clip(name, 64), err)
	}
	st, id, ok := strings.Cut(rest[len(endedLayout)+1:], "-")
	state = jobs.State(st)
	if !ok || !state.Terminal() || CheckID(id) != nil {
		return "", "", time.Time{}, fmt.Errorf("ended marker %q: malformed", Clip(name, 64))
	}
	return id, state, at, nil
}
