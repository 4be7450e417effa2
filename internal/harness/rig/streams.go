package rig

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// JetStream is c's JetStream, over its client's NATS connection.
func JetStream(c *cluster.Cluster) jetstream.JetStream {
	js, err := jetstream.New(c.Bus.Conn())
	if err != nil { // only for a nil connection or bad options: neither happens here
		panic(fmt.Sprintf("jetstream: %v", err))
	}
	return js
}

// JobStore is c's jobs container.
func JobStore(c *cluster.Cluster) *store.Container { return store.New(c.Blob(), c.JobsContainer()) }

// UpdateStream changes the configuration of c's stream name, and returns what restores it.
func UpdateStream(ctx context.Context, c *cluster.Cluster, name string, change func(*jetstream.StreamConfig)) (restore func() error, err error) {
	js := JetStream(c)
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	orig := s.CachedInfo().Config
	cfg := orig
	change(&cfg)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("update stream %s: %w", name, err)
	}
	return func() error {
		_, err := js.UpdateStream(context.WithoutCancel(ctx), orig)
		return err
	}, nil
}

// Publish sends msgs from a plain NATS client (no cluster key) named name, and flushes.
func Publish(c *cluster.Cluster, name string, msgs ...*nats.Msg) error {
	nc, err := nats.Connect(c.NATSURL, nats.Name(name))
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, m := range msgs {
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
	}
	return nc.Flush()
}

// Recording is a copy of messages as a plain NATS client saw them, to publish again.
type Recording struct {
	nc   *nats.Conn
	mu   sync.Mutex
	msgs []*nats.Msg
}

// Record copies every message on subjects from now on, and first those of c's stream whose
// subject ends in suffix (already stored). Stop it to get them.
func Record(ctx context.Context, c *cluster.Cluster, subjects []string, stream, suffix string) (*Recording, error) {
	nc, err := nats.Connect(c.NATSURL, nats.Name("rig-recorder"))
	if err != nil {
		return nil, err
	}
	r := &Recording{nc: nc}
	for _, subj := range subjects {
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) { r.keep(m.Subject, m.Header, m.Data) }); err != nil {
			nc.Close()
			return nil, err
		}
	}
	if s, err := JetStream(c).Stream(ctx, stream); err == nil {
		info := s.CachedInfo()
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			if raw, err := s.GetMsg(ctx, seq); err == nil && strings.HasSuffix(raw.Subject, suffix) {
				r.keep(raw.Subject, raw.Header, raw.Data)
			}
		}
	}
	return r, nil
}

func (r *Recording) keep(subject string, h nats.Header, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, &nats.Msg{Subject: subject, Header: h, Data: data})
}

// Stop ends the recording and returns what it copied.
func (r *Recording) Stop() []*nats.Msg {
	r.nc.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msgs
}

// Seqs are the last sequences of a cluster's shards and results streams.
type Seqs struct{ Shards, Results uint64 }

// LastSeqs reads the last sequences of the streams names gives.
func LastSeqs(ctx context.Context, js jetstream.JetStream, names protocol.Names) (Seqs, error) {
	var out Seqs
	for _, x := range []struct {
		name string
		seq  *uint64
	}{{names.ShardStream(), &out.Shards}, {names.ResultStream(), &out.Results}} {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := js.Stream(sctx, x.name)
		cancel()
		if err != nil {
			return out, fmt.Errorf("stream %s: %w", x.name, err)
		}
		*x.seq = s.CachedInfo().State.LastSeq
	}
	return out, nil
}

// WaitSeqs reads the last sequences, retrying while the server comes back.
func WaitSeqs(ctx context.Context, js jetstream.JetStream, names protocol.Names, within time.Duration) (Seqs, error) {
	until := time.Now().Add(within)
	for {
		s, err := LastSeqs(ctx, js, names)
		if err == nil || time.Now().After(until) || ctx.Err() != nil {
			return s, err
		}
		_ = Sleep(ctx, 100*time.Millisecond)
	}
}
