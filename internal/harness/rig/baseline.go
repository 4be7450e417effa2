package rig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/precise"
	"github.com/mapagg/mapagg/internal/protocol"
)

// BaselineOptions size one baseline variant.
type BaselineOptions struct {
	Name     string // stream name prefix, unique per variant
	Shards   int
	Workers  int // consuming connections, like worker processes
	Prefetch int // messages each pulls ahead
	// ShardsPerMsg > 1 batches as the system does: that many consecutive shards in one message
	// (protocol.EncodeShards), and a worker's results of one message in one message
	// (protocol.EncodeResults). 0 or 1: one message per shard and per result.
	ShardsPerMsg int
}

// DispatchShardsPerMsg is how many shards of a job of total shards the leader puts in one
// message (the coordinator's rule: one below 4,096 shards, else total/4,096 within 2 to 16).
// Below 4,096 a type whose shards ran short last time travels several a message
// (coordinator's pace.go); the throughput job (100,000 shards) is above.
func DispatchShardsPerMsg(total int) int {
	if total < 4096 {
		return 1
	}
	return min(max(total/4096, 2), 16)
}

// Baseline drives the JetStream round trip the system makes for every shard, with no
// coordination: the yardstick of the load test's throughput. It publishes the shards in acked
// batches of 1,024 messages with message ids, as the leader dispatches (ShardsPerMsg shards a
// message). Workers connections fetch, process, publish the results of a message and ack, as
// the workers do. One connection fetches and acks every
// result, as the leader does. Streams and message bodies are the system's. It returns the time
// from the first publish to the last result acknowledged.
func Baseline(ctx context.Context, url string, o BaselineOptions) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	conn := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		nc, err := nats.Connect(url, nats.Name(name))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return nc, js, nil
	}
	lnc, ljs, err := conn(o.Name + "-leader")
	if err != nil {
		return 0, fmt.Errorf("baseline: %w", err)
	}
	defer lnc.Close()
	shardSubj, resultSubj := o.Name+".shards", o.Name+".results"
	up := func(s string) string { return fmt.Sprintf("%s_%s", upper(o.Name), s) }
	for _, sc := range []jetstream.StreamConfig{
		{Name: up("SHARDS"), Subjects: []string{shardSubj + ".>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute},
		{Name: up("RESULTS"), Subjects: []string{resultSubj + ".>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute},
	} {
		if _, err := ljs.CreateOrUpdateStream(ctx, sc); err != nil {
			return 0, fmt.Errorf("baseline stream: %w", err)
		}
		defer func() { _ = ljs.DeleteStream(context.WithoutCancel(ctx), sc.Name) }()
	}
	shardCons, err := ljs.CreateOrUpdateConsumer(ctx, up("SHARDS"), jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: -1,
		MaxAckPending: 65536, FilterSubject: shardSubj + ".>",
	})
	if err != nil {
		return 0, fmt.Errorf("baseline consumer: %w", err)
	}
	resCons, err := ljs.CreateOrUpdateConsumer(ctx, up("RESULTS"), jetstream.ConsumerConfig{
		Durable: "leader", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 60 * time.Second, MaxDeliver: -1,
		MaxAckPending: 1 << 18, FilterSubject: resultSubj + ".>",
	})
	if err != nil {
		return 0, fmt.Errorf("baseline consumer: %w", err)
	}

	// The same bodies the system sends: sleep shards of 0s, and their results.
	job := "20260101-000000-base" + fmt.Sprintf("%04d", o.Shards%10000)
	params, _ := json.Marshal(builtin.SleepParams{Shards: o.Shards})
	sleepJob, err := builtin.Registry().Lookup("sleep")
	if err != nil {
		return 0, err
	}
	plan, err := sleepJob.Split(ctx, nil, params)
	if err != nil {
		return 0, err
	}
	per := max(o.ShardsPerMsg, 1)
	var bodies [][]byte
	var firsts []int
	for i := 0; i < len(plan); i += per {
		b, err := protocol.EncodeShards(protocol.KindAggregate, job, "sleep", 1, i, plan[i:min(i+per, len(plan))])
		if err != nil {
			return 0, err
		}
		bodies, firsts = append(bodies, b), append(firsts, i)
	}

	var wg sync.WaitGroup
	errc := make(chan error, o.Workers+2)
	wctx, stopWorkers := context.WithCancel(ctx)
	defer func() {
		stopWorkers()
		wg.Wait()
	}()
	for w := range o.Workers {
		nc, js, err := conn(fmt.Sprintf("%s-w%d", o.Name, w))
		if err != nil {
			return 0, err
		}
		defer nc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := baselineWorker(wctx, js, shardCons, resultSubj, fmt.Sprintf("w%d", w), o.Prefetch); err != nil && wctx.Err() == nil {
				errc <- err
			}
		}()
	}

	done := make(chan struct{})
	var got atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		seen := make([]bool, o.Shards)
		mc, err := resCons.Messages(jetstream.PullMaxMessages(2048))
		if err != nil {
			errc <- err
			return
		}
		context.AfterFunc(wctx, mc.Stop)
		defer mc.Stop()
		n := 0
		for n < o.Shards {
			m, err := mc.Next()
			if err != nil {
				if wctx.Err() == nil {
					errc <- fmt.Errorf("baseline results: %w", err)
				}
				return
			}
			rs, err := protocol.DecodeResults(m.Data())
			for _, r := range rs {
				if err == nil && r.Index >= 0 && r.Index < o.Shards && !seen[r.Index] {
					seen[r.Index] = true
					n++
				}
			}
			got.Store(int64(n))
			_ = m.Ack()
		}
		close(done)
	}()

	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		const batch = 1024
		for i := 0; i < len(bodies); i += batch {
			futures := make([]jetstream.PubAckFuture, 0, batch)
			for k := i; k < min(i+batch, len(bodies)); k++ {
				f, err := ljs.PublishMsgAsync(&nats.Msg{Subject: shardSubj + "." + job, Data: bodies[k]}, jetstream.WithMsgID(fmt.Sprintf("%s/%d", job, firsts[k])))
				if err != nil {
					errc <- err
					return
				}
				futures = append(futures, f)
			}
			for _, f := range futures {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					errc <- err
					return
				case <-wctx.Done():
					return
				}
			}
		}
	}()
	select {
	case <-done:
		return time.Since(start), nil
	case err := <-errc:
		return 0, fmt.Errorf("baseline: %w", err)
	case <-ctx.Done():
		return 0, fmt.Errorf("baseline: %d of %d results: %w", got.Load(), o.Shards, ctx.Err())
	}
}

// baselineWorker is a worker without a job registry: decode the shard, publish its result, ack
// the shard when the result is stored.
func baselineWorker(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, resultSubj, id string, prefetch int) error {
	mc, err := cons.Messages(jetstream.PullMaxMessages(prefetch))
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, mc.Stop)
	defer mc.Stop()
	type pending struct {
		f jetstream.PubAckFuture
		m jetstream.Msg
	}
	acks := make(chan pending, 4096)
	defer close(acks)
	go func() {
		for p := range acks {
			select {
			case <-p.f.Ok():
				_ = p.m.Ack()
			case <-p.f.Err():
				_ = p.m.Nak()
			}
		}
	}()
	partial := []byte{1, 1, 0}
	for {
		m, err := mc.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		ss, err := protocol.DecodeShards(m.Data())
		if err != nil {
			return err
		}
		md, _ := m.Metadata()
		attempt := 1
		if md != nil {
			attempt = int(md.NumDelivered)
		}
		rs := make([]*protocol.ResultMsg, len(ss))
		for i, s := range ss {
			rs[i] = &protocol.ResultMsg{Kind: s.Kind, Job: s.Job, Index: s.Index, Epoch: s.Epoch, Attempt: attempt, Worker: id, Partial: partial}
		}
		data, err := protocol.EncodeResults(rs)
		if err != nil {
			return err
		}
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: resultSubj + "." + ss[0].Job, Data: data},
			jetstream.WithMsgID(fmt.Sprintf("%s/%d/%d", ss[0].Job, ss[0].Index, attempt)))
		if err != nil {
			return err
		}
		acks <- pending{f, m}
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 32
		case c == '.' || c == '-':
			b[i] = '_'
		}
	}
	return string(b)
}

// SleepRefs runs the bare loop that shards of d are compared with: slots goroutines sleeping d
// in turn, at most a second's worth. It runs once with a time.Timer, once with precise.Sleep,
// and returns ideal ÷ makespan of each.
func SleepRefs(ctx context.Context, d time.Duration, slots, shards int) (timer, exact float64) {
	per := max(1, min(shards/slots, int(time.Second/d)))
	run := func(sleep func(context.Context, time.Duration) error) float64 {
		start := time.Now()
		var wg sync.WaitGroup
		for range slots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					if sleep(ctx, d) != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
		return Round3(float64(per) * d.Seconds() / time.Since(start).Seconds())
	}
	timer = run(precise.TimerSleep)
	return timer, run(precise.Sleep)
}
