package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/jobs"
)

// `worker status` asks a running worker first: the worker keeps the ended jobs' statuses
// (client.StatusCache) and warm storage connections, so an idle cluster's list costs it one
// listing and the leader's lease blob, where a fresh process would read every job. The request
// goes to a queue group, so one live worker answers; a member that is gone has no subscription.
// Without an answer within statusAskTimeout the command reads storage itself.

const (
	// statusQueue is the queue group of the status responders.
	statusQueue = "status"
	// statusAskTimeout is how long `worker status` waits for a worker before reading storage.
	statusAskTimeout = time.Second
	// statusServeTimeout bounds a worker's reads for one status request.
	statusServeTimeout = 5 * time.Second
	// statusServeParallel bounds the status requests a worker serves at once; past it, it
	// does not answer and the asker reads storage itself.
	statusServeParallel = 4
	// maxStatusRequest bounds a request's size.
	maxStatusRequest = 4 << 10
)

// statusSubject is where workers answer status requests.
func statusSubject(prefix string) string { return prefix + ".ctl.status" }

// statusRequest is what `worker status` asks: one job, or a filtered page of jobs.
type statusRequest struct {
	// Container is the asker's jobs container: a worker of another answers nothing useful.
	Container string    `json:"container"`
	Job       string    `json:"job,omitempty"`
	State     string    `json:"state,omitempty"`
	Type      string    `json:"type,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	Limit     int       `json:"limit,omitempty"`
	Before    string    `json:"before,omitempty"`
}

func (r statusRequest) filter() client.Filter {
	return client.Filter{State: jobs.State(r.State), Type: r.Type, Since: r.Since, Limit: r.Limit, Before: r.Before}
}

// statusReply is a worker's answer: the leader and the jobs, or why it could not read them.
type statusReply struct {
	Worker string           `json:"worker"`
	Leader *leaderJSON      `json:"leader"`
	Jobs   []*client.Status `json:"jobs,omitempty"` // oldest first
	Job    *client.Status   `json:"job,omitempty"`
	Next   string           `json:"next,omitempty"`
	// NoSuchJob: the job asked for does not exist; Error: the worker could not read storage.
	NoSuchJob bool   `json:"no_such_job,omitempty"`
	Error     string `json:"error,omitempty"`
}

// decodeStatusRequest decodes a request strictly; it is outside input.
func decodeStatusRequest(data []byte) (statusRequest, error) {
	var r statusRequest
	if len(data) > maxStatusRequest {
		return r, fmt.Errorf("status request of %d bytes: the limit is %d", len(data), maxStatusRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("status request: %w", err)
	}
	if r.Job != "" && (r.State != "" || r.Type != "" || !r.Since.IsZero() || r.Limit != 0 || r.Before != "") {
		return r, errors.New("status request: a job id and a filter")
	}
	if r.Job == "" {
		if err := r.filter().Check(); err != nil {
			return r, err
		}
	}
	return r, nil
}

// decodeStatusReply decodes a worker's answer; it is outside input.
func decodeStatusReply(data []byte) (*statusReply, error) {
	var r statusReply
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("status reply: %w", err)
	}
	if r.Worker == "" {
		return nil, errors.New("status reply: no worker")
	}
	if r.Error == "" && !r.NoSuchJob && r.Job == nil && r.Jobs == nil {
		r.Jobs = []*client.Status{}
	}
	return &r, nil
}

// statusServer answers status requests for one running worker.
type statusServer struct {
	id             string
	cl             *client.Client // with a StatusCache
	blob           *azblob.Client
	leaseContainer string
	log            *slog.Logger
	ctx            context.Context
	slots          chan struct{}
}

// startStatusServer subscribes the worker to status requests until ctx ends.
func startStatusServer(ctx context.Context, nc *nats.Conn, prefix string, s *statusServer) (func(), error) {
	s.ctx, s.slots = ctx, make(chan struct{}, statusServeParallel)
	sub, err := nc.QueueSubscribe(statusSubject(prefix), statusQueue, s.onRequest)
	if err != nil {
		return nil, fmt.Errorf("subscribe status: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func (s *statusServer) onRequest(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		return // busy: the asker reads storage itself
	}
	go func() {
		defer func() { <-s.slots }()
		rep := s.answer(m.Data)
		data, err := json.Marshal(rep)
		if err != nil {
			return
		}
		if err := m.Respond(data); err != nil {
			s.log.Debug("status reply", "err", err)
		}
	}()
}

func (s *statusServer) answer(data []byte) *statusReply {
	rep := &statusReply{Worker: s.id}
	req, err := decodeStatusRequest(data)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	if n, ok := s.cl.Store.(interface{ Name() string }); ok && req.Container != n.Name() {
		rep.Error = fmt.Sprintf("this worker's jobs container is %q, not %q", n.Name(), req.Container)
		return rep
	}
	ctx, cancel := context.WithTimeout(s.ctx, statusServeTimeout)
	defer cancel()
	leader := make(chan error, 1)
	go func() {
		info, err := election.ReadLeader(ctx, s.blob, s.leaseContainer, election.DefaultConfig().Blob)
		if err == nil && info != nil {
			rep.Leader = &leaderJSON{ID: info.ID, Epoch: info.Epoch, Since: info.Since.UTC().Format(time.RFC3339)}
		}
		leader <- err
	}()
	var jerr error
	if req.Job != "" {
		rep.Job, jerr = s.cl.Status(ctx, req.Job)
		if errors.Is(jerr, client.ErrNoSuchJob) {
			rep.NoSuchJob, jerr = true, nil
		}
	} else {
		var page *client.Page
		if page, jerr = s.cl.Query(ctx, req.filter()); jerr == nil {
			rep.Jobs, rep.Next = oldestFirst(page.Jobs), page.Next
		}
	}
	if lerr := <-leader; jerr == nil && lerr != nil {
		jerr = fmt.Errorf("read leader: %w", lerr)
	}
	if jerr != nil {
		rep.Error = jerr.Error()
		rep.Jobs, rep.Job = nil, nil
	}
	return rep
}

// oldestFirst turns Query's newest-first page into the order status prints: the newest at the
// bottom, as a log reads.
func oldestFirst(list []client.Status) []*client.Status {
	out := make([]*client.Status, 0, len(list))
	for i := len(list) - 1; i >= 0; i-- {
		out = append(out, &list[i])
	}
	return out
}

// askStatus asks a running worker for req over NATS. It returns nil (and the caller reads
// storage) when NATS is unreachable, no worker answers in time, or the answer says the worker
// could not read storage.
func askStatus(ctx context.Context, c *common, req statusRequest) *statusReply {
	if c.natsURL == "" || c.natsURL == client.NATSOff {
		return nil
	}
	opts, err := c.natsOptions()
	if err != nil {
		return nil
	}
	opts = append(opts, nats.Name("mapagg-status"), nats.Timeout(statusAskTimeout), nats.NoReconnect())
	nc, err := nats.Connect(c.natsURL, opts...)
	if err != nil {
		return nil
	}
	defer nc.Close()
	data, err := json.Marshal(req)
	if err != nil {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, statusAskTimeout)
	defer cancel()
	m, err := nc.RequestWithContext(actx, statusSubject(c.streamPrefix), data)
	if err != nil {
		return nil
	}
	rep, err := decodeStatusReply(m.Data)
	if err != nil || rep.Error != "" {
		return nil
	}
	return rep
}
