package observe

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/worker"
)

// Metrics holds a worker's Prometheus metrics in their own registry (never the global one). It
// implements worker.Metrics and coordinator.Metrics, and takes election and coordinator events.
type Metrics struct {
	Registry *prometheus.Registry

	leader, epoch, inFlight              prometheus.Gauge
	terms                                prometheus.Counter
	electionEvents, coordinatorEvents    *prometheus.CounterVec
	codeFailures                         *prometheus.CounterVec
	renewSeconds                         prometheus.Histogram
	mapSeconds                           *prometheus.HistogramVec
	merged, duplicates, checkpointFailed prometheus.Counter
	checkpointSeconds, checkpointBytes   prometheus.Histogram
	inFlightN                            atomic.Int64
}

var (
	_ worker.Metrics      = (*Metrics)(nil)
	_ coordinator.Metrics = (*Metrics)(nil)
)

// Sources are the counters other parts already keep; nil fields are left out.
type Sources struct {
	Worker  func() worker.Stats
	Elector func() election.Stats
	// QueuedShards counts the shards waiting in the stream (the same on every worker).
	QueuedShards func(ctx context.Context) (uint64, error)
	// Trust counts refused messages and cut-offs from NATS.
	Trust func() TrustStats
}

// TrustStats are the counters of messages this worker refused and of its cut-offs from NATS.
type TrustStats struct {
	Refused        uint64 // shards and results without a valid MAC, dead-lettered
	ControlRefused uint64 // control messages (heartbeats) without a valid MAC, dead-lettered
	CutOffs        uint64 // times this worker found itself cut off from NATS
}

// NewMetrics registers every metric (names in README, "Metrics") with a new registry, plus the
// Go runtime and process collectors.
func NewMetrics(version string, src Sources) *Metrics {
	r := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	m := &Metrics{Registry: r}
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mapagg_build_info", Help: "Always 1; the version label names the build.",
		ConstLabels: prometheus.Labels{"version": version}}, func() float64 { return 1 }))

	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mapagg_leader", Help: "1 while this worker leads the cluster, else 0."})
	m.epoch = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mapagg_leader_epoch", Help: "Epoch of the term this worker leads or last led (0: never led)."})
	m.terms = prometheus.NewCounter(prometheus.CounterOpts{Name: "mapagg_leader_terms_total", Help: "Terms this worker won."})
	m.electionEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mapagg_election_events_total", Help: "Election transitions of this worker by kind (elected, lost, stepped_down, released)."}, []string{"kind"})
	m.coordinatorEvents = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mapagg_coordinator_events_total", Help: "Coordinator events of this worker by kind (term_started, first_merge, job_planned, job_resumed, job_finished, job_code_failed, job_waiting, dead_lettered, term_ended)."}, []string{"kind"})
	m.codeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mapagg_job_code_failures_total", Help: "Calls of job code on the leader that panicked or failed, failing their job, by job type and call (split, merge, result, ...)."}, []string{"type", "call"})
	m.renewSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mapagg_lease_renew_duration_seconds", Help: "Time of lease renew calls (successful or not).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mapagg_shards_in_flight", Help: "Map steps running now on this worker."})
	m.mapSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mapagg_map_duration_seconds", Help: "Time of map steps by job type and outcome.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"type", "outcome"})
	m.merged = prometheus.NewCounter(prometheus.CounterOpts{Name: "mapagg_results_merged_total", Help: "Results merged by this worker while leading."})
	m.duplicates = prometheus.NewCounter(prometheus.CounterOpts{Name: "mapagg_results_duplicates_dropped_total", Help: "Results dropped because their shard was already merged."})
	m.checkpointSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mapagg_checkpoint_write_duration_seconds", Help: "Time of checkpoint writes.",
		Buckets: []float64{.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}})
	m.checkpointBytes = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mapagg_checkpoint_size_bytes", Help: "Size of written checkpoints.",
		Buckets: prometheus.ExponentialBuckets(256, 4, 10)})
	m.checkpointFailed = prometheus.NewCounter(prometheus.CounterOpts{Name: "mapagg_checkpoint_write_failures_total", Help: "Checkpoint writes that failed (including conflicts)."})
	for _, c := range []prometheus.Collector{m.leader, m.epoch, m.terms, m.electionEvents, m.coordinatorEvents, m.codeFailures, m.renewSeconds,
		m.inFlight, m.mapSeconds, m.merged, m.duplicates, m.checkpointSeconds, m.checkpointBytes, m.checkpointFailed} {
		f(c)
	}
	for _, k := range []election.EventKind{election.EventElected, election.EventLost, election.EventSteppedDown, election.EventReleased} {
		m.electionEvents.WithLabelValues(string(k))
	}
	for _, k := range []coordinator.EventKind{coordinator.EventTermStarted, coordinator.EventFirstMerge, coordinator.EventJobPlanned,
		coordinator.EventJobResumed, coordinator.EventJobFinished, coordinator.EventJobCodeFailed, coordinator.EventJobWaiting,
		coordinator.EventDeadLettered, coordinator.EventTermEnded} {
		m.coordinatorEvents.WithLabelValues(string(k))
	}
	if s := src.Worker; s != nil {
		counter := func(name, help string, v func(worker.Stats) int64) {
			f(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(s())) }))
		}
		counter("mapagg_shards_executed_total", "Map steps run by this worker (successful or not).", func(s worker.Stats) int64 { return s.Executed })
		counter("mapagg_shards_succeeded_total", "Results published by this worker.", func(s worker.Stats) int64 { return s.Succeeded })
		counter("mapagg_shards_failed_total", "Map steps that returned an error or panicked.", func(s worker.Stats) int64 { return s.Failed })
		counter("mapagg_shards_gave_up_total", "Shards reported failed after the last attempt.", func(s worker.Stats) int64 { return s.GaveUp })
		counter("mapagg_shards_redelivered_total", "Shard deliveries with attempt > 1.", func(s worker.Stats) int64 { return s.Redelivered })
		counter("mapagg_shards_malformed_total", "Undecodable shard messages, dead-lettered.", func(s worker.Stats) int64 { return s.Malformed })
		counter("mapagg_shards_replayed_total", "Shards of ended jobs dropped before running (replays).", func(s worker.Stats) int64 { return s.Replayed })
		counter("mapagg_result_publish_retries_total", "Result publishes retried after a failure (JetStream full, NATS away).", func(s worker.Stats) int64 { return s.PublishRetries })
	}
	if s := src.Elector; s != nil {
		f(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mapagg_lease_renewals_total", Help: "Successful lease renewals."},
			func() float64 { return float64(s().Renewals) }))
		f(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mapagg_lease_renew_failures_total", Help: "Failed lease renew calls (transient and definitive)."},
			func() float64 { return float64(s().RenewFailures) }))
		f(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mapagg_leader_losses_total", Help: "Terms ended by loss: lease refused, deadline passed, or unhealthy."},
			func() float64 { return float64(s().Losses) }))
	}
	if s := src.Elector; s != nil {
		f(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mapagg_heartbeats_unconfirmed_total", Help: "Heartbeats of a newer term that the lease blob did not confirm (ignored)."},
			func() float64 { return float64(s().Unconfirmed) }))
	}
	if s := src.Trust; s != nil {
		counter := func(name, help string, v func(TrustStats) uint64) {
			f(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(s())) }))
		}
		counter("mapagg_messages_refused_total", "Shard and result deliveries without a valid cluster-key MAC, dead-lettered.", func(s TrustStats) uint64 { return s.Refused })
		counter("mapagg_control_refused_total", "Control messages (heartbeats) without a valid cluster-key MAC, dead-lettered.", func(s TrustStats) uint64 { return s.ControlRefused })
		counter("mapagg_nats_cutoffs_total", "Times this worker found itself cut off from NATS (round trips not coming back).", func(s TrustStats) uint64 { return s.CutOffs })
	}
	if q := src.QueuedShards; q != nil {
		f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mapagg_shards_queued", Help: "Shards waiting in the shard stream, cluster-wide (NaN when NATS does not answer within 2s)."},
			func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				n, err := q(ctx)
				if err != nil {
					return math.NaN()
				}
				return float64(n)
			}))
	}
	return m
}

// MapStarted implements worker.Metrics.
func (m *Metrics) MapStarted(string) { m.inFlight.Set(float64(m.inFlightN.Add(1))) }

// MapFinished implements worker.Metrics.
func (m *Metrics) MapFinished(typ string, took time.Duration, err error) {
	m.inFlight.Set(float64(m.inFlightN.Add(-1)))
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.mapSeconds.WithLabelValues(typ, outcome).Observe(took.Seconds())
}

// InFlight is how many map steps run now.
func (m *Metrics) InFlight() int { return int(m.inFlightN.Load()) }

// ResultMerged implements coordinator.Metrics.
func (m *Metrics) ResultMerged() { m.merged.Inc() }

// DuplicateDropped implements coordinator.Metrics.
func (m *Metrics) DuplicateDropped() { m.duplicates.Inc() }

// CheckpointWritten implements coordinator.Metrics.
func (m *Metrics) CheckpointWritten(took time.Duration, bytes int, err error) {
	if err != nil {
		m.checkpointFailed.Inc()
		return
	}
	m.checkpointSeconds.Observe(took.Seconds())
	m.checkpointBytes.Observe(float64(bytes))
}

// ElectionEvent counts an election transition and tracks leadership.
func (m *Metrics) ElectionEvent(ev election.Event) {
	m.electionEvents.WithLabelValues(string(ev.Kind)).Inc()
	switch ev.Kind {
	case election.EventElected:
		m.terms.Inc()
		m.leader.Set(1)
		m.epoch.Set(float64(ev.Term.Epoch))
	case election.EventLost, election.EventSteppedDown:
		m.leader.Set(0)
	}
}

// CoordinatorEvent counts a coordinator event.
func (m *Metrics) CoordinatorEvent(ev coordinator.Event) {
	m.coordinatorEvents.WithLabelValues(string(ev.Kind)).Inc()
	var ue *coordinator.UserCodeError
	if ev.Kind == coordinator.EventJobCodeFailed && errors.As(ev.Err, &ue) {
		m.codeFailures.WithLabelValues(ue.Type, ue.Call).Inc()
	}
}

// TimeRenewals wraps a lease API so that the time of every RenewLease call is observed.
func (m *Metrics) TimeRenewals(api election.BlobAPI) election.BlobAPI { return timedAPI{api, m} }

type timedAPI struct {
	election.BlobAPI
	m *Metrics
}

func (t timedAPI) RenewLease(ctx context.Context, container, blob, leaseID string) error {
	start := time.Now()
	err := t.BlobAPI.RenewLease(ctx, container, blob, leaseID)
	if !errors.Is(err, context.Canceled) {
		t.m.renewSeconds.Observe(time.Since(start).Seconds())
	}
	return err
}
