package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Query limits.
const (
	// DefaultQueryLimit is the page size when Filter.Limit is 0.
	DefaultQueryLimit = 50
	// MaxQueryLimit is the largest page.
	MaxQueryLimit = 1000
	// maxQueryScan bounds the jobs one Query reads; a filter that matches rarely returns a
	// shorter page with Next set, so every call costs a bounded number of reads.
	maxQueryScan = 2000
	// perJobTimeout bounds the reads of one job: a hung one is listed as unreadable.
	perJobTimeout = 3 * time.Second
	// queryParallel bounds the statuses Query reads at once.
	queryParallel = 16
)

// Filter selects jobs for Query. Zero fields select everything.
type Filter struct {
	State jobs.State // only jobs in this state (StateUnreadable for damaged jobs)
	Type  string     // only jobs of this type
	// Since keeps jobs submitted at or after it (to the second, as job ids record it).
	Since time.Time
	// Before is a cursor: only jobs whose id sorts before it (Page.Next of the previous page).
	Before string
	// Limit is the page size: default DefaultQueryLimit, at most MaxQueryLimit.
	Limit int
	// Prefix keeps the jobs whose id starts with it: a whole id, or its start by time
	// ("20261128-1012"). Storage lists only those ids. At most 64 characters of a-z, 0-9, '-'.
	Prefix string
}

// Check reports a filter Query would refuse.
func (f Filter) Check() error {
	var errs []error
	if f.Limit < 0 || f.Limit > MaxQueryLimit {
		errs = append(errs, fmt.Errorf("limit %d: use 1 to %d (0 for %d)", f.Limit, MaxQueryLimit, DefaultQueryLimit))
	}
	if f.State != "" && !slices.Contains(jobStates, f.State) {
		errs = append(errs, fmt.Errorf("state %q: use one of %v", protocol.Clip(string(f.State), 32), jobStates))
	}
	if f.Before != "" {
		if err := protocol.CheckID(f.Before); err != nil {
			errs = append(errs, fmt.Errorf("before: %w", err))
		}
	}
	if len(f.Prefix) > 64 || strings.Trim(f.Prefix, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		errs = append(errs, fmt.Errorf("prefix %q: a job id or its start, at most 64 characters of a-z, 0-9 and '-'", protocol.Clip(f.Prefix, 64)))
	}
	if len(f.Type) > 128 {
		errs = append(errs, fmt.Errorf("type: %d characters, at most 128", len(f.Type)))
	}
	return errors.Join(errs...)
}

// jobStates lists the states a Filter may select.
var jobStates = []jobs.State{jobs.StateQueued, jobs.StateWaiting, jobs.StateRunning, jobs.StateSucceeded, jobs.StateFailed, jobs.StateCancelled, StateUnknown, StateUnreadable}

// Spec reads a job's spec: its type, parameters, submission time, priority and output format.
func (c *Client) Spec(ctx context.Context, id string) (*Spec, error) {
	if err := protocol.CheckID(id); err != nil {
		return nil, err
	}
	spec, err := c.jobStore().Spec(ctx, id)
	if err != nil {
		return nil, err
	}
	return fromSpec(spec), nil
}

// Page is one page of Query, newest first.
type Page struct {
	Jobs []Status `json:"jobs"`
	// Next is the cursor of the following page (Filter.Before); empty on the last page.
	Next string `json:"next,omitempty"`
}

// Query returns the jobs f selects, newest first, one page at a time. It reads each candidate
// with Status; an unreadable job is listed with its error, as List does.
func (c *Client) Query(ctx context.Context, f Filter) (*Page, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultQueryLimit
	}
	dirs, err := c.Store.ListDirs(ctx, f.Prefix)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	var ids []string
	for _, d := range dirs {
		if jobDir(d) {
			ids = append(ids, d)
		}
	}
	slices.Sort(ids)
	if f.Before == "" && f.Since.IsZero() && f.Prefix == "" {
		c.Cache.keep(ids) // a whole listing: a cached job not in it was deleted
	}
	since := ""
	if !f.Since.IsZero() {
		since = f.Since.UTC().Format("20060102-150405")
	}
	page := &Page{Jobs: []Status{}}
	var cand []string // newest first: the jobs this page may read
	for i := len(ids) - 1; i >= 0 && len(cand) <= maxQueryScan; i-- {
		id := ids[i]
		if f.Before != "" && id >= f.Before {
			continue
		}
		if since != "" && id < since {
			break // ids sort by submission time
		}
		cand = append(cand, id)
	}
	more := len(cand) > maxQueryScan // one more than a call reads: the next page has jobs
	cand = cand[:min(len(cand), maxQueryScan)]
	// Statuses are read queryParallel at a time (metadata only), and taken in order.
	for k := 0; k < len(cand); k += queryParallel {
		chunk := cand[k:min(k+queryParallel, len(cand))]
		sts, errs := c.statuses(ctx, chunk)
		for i, id := range chunk {
			if len(page.Jobs) == limit {
				page.Next = cand[k+i-1] // the oldest id read; the next page starts below it
				return page, nil
			}
			st, err := sts[i], errs[i]
			if errors.Is(err, ErrNoSuchJob) {
				continue // a folder without a spec (input data)
			}
			if err != nil {
				if ctx.Err() != nil {
					// Out of time: what was read is a page, and the rest is the next one. One
					// slow job never fails the list.
					if len(page.Jobs) == 0 {
						return nil, fmt.Errorf("status of %s: %w", id, err)
					}
					if k+i > 0 {
						page.Next = cand[k+i-1] // the next page starts with this job
					}
					return page, nil
				}
				st = &Status{ID: id, State: StateUnreadable, Unreadable: err.Error()}
			}
			if (f.State == "" || st.State == f.State) && (f.Type == "" || st.Type == f.Type) {
				page.Jobs = append(page.Jobs, *st)
			}
		}
	}
	if more && len(cand) > 0 {
		page.Next = cand[len(cand)-1] // scanned maxQueryScan jobs: the rest is the next page
	}
	return page, nil
}

// statuses reads the status of each of ids at once, each within perJobTimeout.
func (c *Client) statuses(ctx context.Context, ids []string) ([]*Status, []error) {
	sts, errs := make([]*Status, len(ids)), make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, ok := c.Cache.get(id); ok {
				sts[i] = st
				return
			}
			jctx, cancel := context.WithTimeout(ctx, perJobTimeout)
			defer cancel()
			sts[i], errs[i] = c.Status(jctx, id)
			if errs[i] == nil {
				c.Cache.put(sts[i])
			}
		}()
	}
	wg.Wait()
	return sts, errs
}
