package client

import (
	"sync"

	"github.com/mapagg/mapagg/internal/protocol"
)

// StatusCache keeps the status of ended jobs, which no longer changes, so that a long-lived
// client (a worker's API and status responder) reads again only the jobs that may still move:
// an idle cluster's list then costs one listing. A deleted job leaves the cache when a listing
// no longer holds it. The zero value is ready; safe for concurrent use.
type StatusCache struct {
	mu sync.Mutex
	m  map[string]*Status
}

// statusCacheMax bounds the cache: past it, it starts again empty.
const statusCacheMax = 100_000

func (c *StatusCache) get(id string) (*Status, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.m[id]
	if !ok {
		return nil, false
	}
	cp := *st
	return &cp, true
}

func (c *StatusCache) put(st *Status) {
	if c == nil || st == nil || !st.State.Terminal() || st.Note != "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= statusCacheMax {
		c.m = map[string]*Status{}
	}
	cp := *st
	cp.Share, cp.Position = 0, 0
	c.m[st.ID] = &cp
}

// keep drops every cached job not in ids (the listing's jobs: the others were deleted).
func (c *StatusCache) keep(ids []string) {
	if c == nil {
		return
	}
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.m {
		if !set[id] {
			delete(c.m, id)
		}
	}
}

// systemDirs are the folders of the jobs container that are not jobs (ids are made by
// protocol.NewID and start with a digit, so none can be a job).
var systemDirs = map[string]bool{"active": true, "ended": true, "migrations": true, "schedules": true}

// jobDir reports whether a folder of the jobs container may be a job.
func jobDir(d string) bool {
	return protocol.CheckID(d) == nil && !systemDirs[d]
}
