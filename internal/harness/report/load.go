package report

import (
	"encoding/json"
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// Load is the load test's JSON report, but for the sections its command keeps. Durations are
// seconds (float); every distribution carries its p50, p90 and max.
type Load struct {
	rig.Header
	Seed       uint64       `json:"seed"`
	Settings   LoadSettings `json:"settings"`
	Scenarios  []string     `json:"scenarios"`
	Incomplete string       `json:"incomplete,omitempty"` // why the run stopped early, if it did

	Throughput  *Throughput  `json:"throughput,omitempty"`
	Efficiency  []Efficiency `json:"efficiency,omitempty"`
	SmallJob    *SmallJob    `json:"small_job,omitempty"`
	Wordcount   *Wordcount   `json:"wordcount,omitempty"`
	Straggler   *Straggler   `json:"straggler,omitempty"`
	Million     *Million     `json:"million,omitempty"`
	Loaded      *Loaded      `json:"loaded,omitempty"`
	Outage      *Outage      `json:"nats_outage,omitempty"`
	NATSCluster *NATSCluster `json:"nats_cluster,omitempty"`
	Failover    Failover     `json:"failover"`
	WorkerCrash *WorkerCrash `json:"worker_crash,omitempty"`

	// RedoneShards counts shards run more than once in the failover runs: redelivered after a
	// kill (attempt > 1), or completed again.
	RedoneShards int `json:"redone_shards"`
	// CompletedRerun counts shards a surviving process had completed that ran again after a kill.
	// The target is zero: only shards in flight on the killed process may run twice.
	CompletedRerun int `json:"completed_shards_rerun"`
	// RedoneOverBound counts SIGKILL runs that redelivered more shards than the killed processes
	// could hold (Settings.InFlightBound).
	RedoneOverBound int `json:"redone_over_bound"`
	WrongResults    int `json:"wrong_results"` // jobs that failed or ended with another result
	LostJobs        int `json:"lost_jobs"`     // jobs not ended within the job timeout
	Jobs            int `json:"jobs"`          // jobs submitted

	Targets []Target `json:"targets"`
	Errors  []string `json:"errors,omitempty"`
	Plot    string   `json:"plot,omitempty"`
}

// Account adds one job's outcome to the correctness totals.
func (rep *Load) Account(o rig.Outcome) {
	rep.Jobs++
	switch {
	case o.Lost:
		rep.LostJobs++
		rep.Errors = append(rep.Errors, "lost: "+o.Problem)
	case !o.Exact:
		rep.WrongResults++
		rep.Errors = append(rep.Errors, "wrong: "+o.Problem)
	}
}

// LoadSettings are the cluster settings that shape the figures.
type LoadSettings struct {
	Workers               int     `json:"workers"`
	Concurrency           int     `json:"concurrency"`
	ThroughputConcurrency int     `json:"throughput_concurrency"`
	LeaseS                float64 `json:"lease_s"`
	ShardTimeoutS         float64 `json:"shard_timeout_s"`
	MapDelayS             float64 `json:"map_delay_s"`
	FailoverShards        int     `json:"failover_shards"`
	Parallel              int     `json:"parallel_clusters"`
	// InFlightBound is how many shards one worker process can hold unacknowledged: concurrency
	// running, concurrency prefetched, one handed over.
	InFlightBound int    `json:"in_flight_bound"`
	Attached      bool   `json:"attached"`
	WorkerBin     string `json:"worker_bin"`
}

// Throughput is scenario 1.
type Throughput struct {
	Shards       int     `json:"shards"`
	Concurrency  int     `json:"concurrency"`
	ShardsPerS   float64 `json:"shards_per_s"`   // best run, submit to job finished
	BaselinePerS float64 `json:"baseline_per_s"` // best baseline variant, batched as the dispatcher does
	Ratio        float64 `json:"ratio"`          // shards_per_s ÷ baseline_per_s
	// ShardsPerMsg is how many shards the dispatcher (and the batched baseline) puts in a message.
	ShardsPerMsg int `json:"shards_per_msg"`
	// UnbatchedPerS is the best one-message-per-shard baseline; UnbatchedRatio shards_per_s ÷ it.
	UnbatchedPerS  float64         `json:"unbatched_baseline_per_s"`
	UnbatchedRatio float64         `json:"unbatched_ratio"`
	Runs           []ThroughputRun `json:"runs"`
	Baseline       []BaselineRun   `json:"baseline"`
	PerS           rig.Dist        `json:"per_s"`
	// CPUMicrosPerShard is CPU time (user+sys of the workers and of the load test's process with
	// its NATS server; Azurite not counted) per shard of the best run.
	CPUMicrosPerShard float64 `json:"cpu_us_per_shard"`
	// StorageCPUMicrosPerShard is the storage emulator's CPU per shard in the same run (0 when
	// attached to a storage account).
	StorageCPUMicrosPerShard float64 `json:"storage_cpu_us_per_shard"`
}

// ThroughputRun is one zero-duration sleep job.
type ThroughputRun struct {
	Job        string  `json:"job"`
	SecondsE2E float64 `json:"seconds"`      // submit to finished (checkpoint time)
	PerS       float64 `json:"shards_per_s"` // shards ÷ seconds
	PlannedS   float64 `json:"planned_s"`    // submit to the job_planned event
	Exact      bool    `json:"exact"`
	Duplicates int64   `json:"duplicates"`
	CPUMicros  float64 `json:"cpu_us_per_shard"` // CPU time per shard, as Throughput's
	// StorageCPUMicros is the storage emulator's CPU time per shard.
	StorageCPUMicros float64 `json:"storage_cpu_us_per_shard"`
}

// BaselineRun is one variant of the uncoordinated JetStream round trip.
type BaselineRun struct {
	Workers      int     `json:"workers"`
	Prefetch     int     `json:"prefetch"`
	ShardsPerMsg int     `json:"shards_per_msg"` // 1: one message per shard and per result
	Seconds      float64 `json:"seconds"`
	PerS         float64 `json:"shards_per_s"`
}

// Efficiency is scenario 2.
type Efficiency struct {
	Shards            int     `json:"shards"`
	ShardS            float64 `json:"shard_s"`
	Slots             int     `json:"slots"`
	IdealS            float64 `json:"ideal_s"`             // shards × shard duration ÷ slots
	MakespanS         float64 `json:"makespan_s"`          // submit to finished
	Ratio             float64 `json:"ratio"`               // ideal ÷ makespan (1 is perfect)
	MakespanOverIdeal float64 `json:"makespan_over_ideal"` // the inverse
	PlannedS          float64 `json:"planned_s"`           // submit to the job_planned event
	// SlotUse is the slots' time spent in map steps ÷ (slots × makespan), from the map times the
	// results carry: what the coordination costs, whatever the shards' sleep overshoots.
	SlotUse   float64 `json:"slot_use"`
	MapMeanMs float64 `json:"map_mean_ms"` // the workers' mean map time: the shard's length and the sleep's overshoot
	// TimerRef and PreciseRef are ideal ÷ makespan of a bare loop in this process: slots
	// goroutines sleeping shard_s in turn, with a time.Timer and with the sleep job's precise
	// sleep. They are the best the system could reach with either sleep.
	TimerRef   float64 `json:"timer_ref"`
	PreciseRef float64 `json:"precise_ref"`
	Job        string  `json:"job"`
	Exact      bool    `json:"exact"`
}

// Failover holds scenarios 3 and 4.
type Failover struct {
	Crash    *LeaderFailover `json:"crash,omitempty"`
	Graceful *LeaderFailover `json:"graceful,omitempty"`
}

// LeaderFailover summarizes runs that kill (or stop) the leader. Each kill of a leader is one
// sample; a run that also kills the next leader gives two.
type LeaderFailover struct {
	// P50S, P90S, MaxS: seconds from the signal to another worker's elected event.
	P50S         float64       `json:"p50_s"`
	P90S         float64       `json:"p90_s"`
	MaxS         float64       `json:"max_s"`
	ToLeader     rig.Dist      `json:"to_leader_s"`      // those again, with n and min
	ToFirstMerge rig.Dist      `json:"to_first_merge_s"` // to the first result the new leader merged
	Redone       rig.Dist      `json:"redone"`           // shards run more than once per run
	Duplicates   rig.Dist      `json:"duplicates"`       // results dropped as duplicates per run
	TimeLost     rig.Dist      `json:"time_lost_s"`      // makespan − the cluster's no-kill makespan of the job
	Exit         rig.Dist      `json:"exit_s"`           // from the signal to the process's exit
	Runs         []FailoverRun `json:"runs"`
}

// WorkerCrash is scenario 5.
type WorkerCrash struct {
	TimeLost rig.Dist      `json:"time_lost_s"`
	Redone   rig.Dist      `json:"redone"`
	Runs     []FailoverRun `json:"runs"`
}

// The kinds of failover run, as the load test's scenarios name them.
const (
	KindCrash       = "crash"        // SIGKILL the leader
	KindGraceful    = "graceful"     // SIGTERM the leader
	KindWorkerCrash = "worker-crash" // SIGKILL a follower
)

// FailoverRun is one job with one or two kills.
type FailoverRun struct {
	Kind       string          `json:"kind"` // crash, graceful, worker-crash
	N          int             `json:"n"`
	Cluster    string          `json:"cluster"`
	Job        string          `json:"job"`
	JobType    string          `json:"job_type"`
	Shards     int             `json:"shards"`
	KillAt     float64         `json:"kill_at"` // target progress of the first kill
	Kills      []Kill          `json:"kills"`
	Elections  []rig.Elect     `json:"elections,omitempty"`
	MakespanS  float64         `json:"makespan_s"`
	ReferenceS float64         `json:"reference_s"` // the cluster's no-kill makespan of the same job
	TimeLostS  float64         `json:"time_lost_s"`
	State      string          `json:"state"`
	Exact      bool            `json:"exact"`
	Lost       bool            `json:"lost,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
	Skipped    string          `json:"skipped,omitempty"` // why no kill happened (the job ended first)

	Duplicates     int64 `json:"duplicates"`      // status: results dropped, shard already merged
	Redelivered    int   `json:"redelivered"`     // shards whose result came with attempt > 1
	CompletedTwice int   `json:"completed_twice"` // shards with more than one result
	Redone         int   `json:"redone"`          // shards run more than once (either of the above)
	CompletedRerun int   `json:"completed_rerun"` // completed by a survivor, then run again
	Redispatched   int   `json:"redispatched"`    // shard publishes beyond the first (deduplicated by JetStream)
	BackedUp       int   `json:"backed_up"`       // shards the leader backed up (run twice on purpose, not counted above)
	Results        int   `json:"results"`         // result messages seen
	// RerunAfterS: seconds after the first kill at which each result of a re-run (attempt > 1)
	// arrived: in-flight shards handed back at once come early, shards left to AckWait late.
	RerunAfterS []float64 `json:"rerun_after_s,omitempty"`

	Timeline *rig.Timeline `json:"-"` // the run drawn, if it is plotted
}

// Kill is one signal sent to a worker.
type Kill struct {
	AtS       float64 `json:"at_s"` // since submit
	Worker    string  `json:"worker"`
	Signal    string  `json:"signal"`
	Leader    bool    `json:"leader"`
	Epoch     uint64  `json:"epoch,omitempty"` // the killed leader's epoch
	Done      int     `json:"done"`            // shards merged (last checkpoint) at the kill
	ExitS     float64 `json:"exit_s"`          // signal to process exit
	ToLeaderS float64 `json:"to_leader_s,omitempty"`
	ToMergeS  float64 `json:"to_first_merge_s,omitempty"`
	NewLeader string  `json:"new_leader,omitempty"`
	NewEpoch  uint64  `json:"new_epoch,omitempty"`
	MergeSeen bool    `json:"first_merge_seen"`

	Sent time.Time `json:"-"` // when the signal was sent
}

// SmallJob is the small-job scenario: primes below 2·10^7 in 200 shards on an idle cluster.
type SmallJob struct {
	Runs     int      `json:"runs"`
	Exact    int      `json:"exact"`
	Makespan rig.Dist `json:"makespan_s"` // submit to finished (checkpoint FinishedAt)
	Planned  rig.Dist `json:"planned_s"`  // submit to the job_planned event
	MedianS  float64  `json:"median_s"`
}

// Wordcount compares a wordcount of a 200k-word vocabulary with one of a 1k-word vocabulary:
// same corpus size and shard count.
type Wordcount struct {
	Shards int            `json:"shards"`
	Bytes  int            `json:"bytes"`
	Jobs   []WordcountRun `json:"jobs"`
	Ratio  float64        `json:"ratio"` // big vocabulary's best shards/s ÷ small's
}

// WordcountRun is one wordcount job.
type WordcountRun struct {
	Vocabulary int     `json:"vocabulary"`
	Job        string  `json:"job"`
	MakespanS  float64 `json:"makespan_s"`
	PerS       float64 `json:"shards_per_s"`
	Exact      bool    `json:"exact"`
}

// Straggler is the straggler scenario: the judged comparison on a cluster of StragglerWorkers
// workers, and the same on a cluster of Workers workers (Small), reported against its bound.
type Straggler struct {
	StragglerRun
	Small *StragglerRun `json:"small,omitempty"`
}

// StragglerRun compares a job on a cluster with one worker 10× slower against the same job on a
// cluster of the same size without it. Over Runs rounds, the best makespan of each counts.
type StragglerRun struct {
	Workers    int     `json:"workers"`
	Shards     int     `json:"shards"`
	Runs       int     `json:"runs"`
	DelayS     float64 `json:"map_delay_s"`
	StragglerS float64 `json:"straggler_map_delay_s"`
	ReferenceS float64 `json:"reference_makespan_s"` // best
	MakespanS  float64 `json:"makespan_s"`           // best
	Ratio      float64 `json:"ratio"`                // makespan ÷ reference
	// Bound is the capacity bound of the ratio: N workers of which one runs at a tenth of the
	// speed have N − 0.9 workers' worth of capacity, so no scheduler beats N ÷ (N − 0.9).
	Bound float64 `json:"capacity_bound"`
	// TailS is what the makespan spent beyond the bound: makespan − reference × Bound.
	TailS float64 `json:"tail_s"`
	Exact bool    `json:"exact"` // every job
	// Every job's makespan, without and with the straggler.
	Reference rig.Dist `json:"reference_makespans_s"`
	Makespan  rig.Dist `json:"makespans_s"`
	// Per job with the straggler: the results the slow worker published (duplicates included),
	// the shards dispatched more than once (backup tasks), the shards whose result was
	// published twice; and the shards backed up without the straggler.
	StragglerDone    rig.Dist `json:"straggler_results"`
	Backups          rig.Dist `json:"backups"`
	Duplicates       rig.Dist `json:"duplicates"`
	ReferenceBackups rig.Dist `json:"reference_backups"`
	// LastPercent is how long each job's last 1 % of shards took (from the result that left 1 %
	// without one to the last shard's first result), with and without the straggler: the tail,
	// hardly touched by the bulk's throughput.
	LastPercent          rig.Dist `json:"last_percent_s"`
	ReferenceLastPercent rig.Dist `json:"reference_last_percent_s"`
}

// Million is the big job: leader memory and JetStream backlog while it runs, the leader killed at
// 50 %.
type Million struct {
	Shards          int         `json:"shards"`
	Job             string      `json:"job"`
	MakespanS       float64     `json:"makespan_s"`
	Exact           bool        `json:"exact"`
	Killed          bool        `json:"leader_killed"`
	KilledAt        int         `json:"killed_at_done"`
	ToLeaderS       float64     `json:"to_leader_s"`
	MaxLeaderRSSMiB float64     `json:"max_leader_rss_mib"` // every leader of the job, sampled
	RSSSamples      int         `json:"rss_samples"`
	MaxBacklog      uint64      `json:"max_backlog_msgs"` // shard stream messages, sampled
	MaxBacklogBytes uint64      `json:"max_backlog_bytes"`
	Window          int         `json:"dispatch_window_shards"` // the coordinator's default window
	Samples         []MemSample `json:"samples,omitempty"`

	Timeline *rig.Timeline `json:"-"` // the run drawn, if it is plotted
}

// MemSample is one reading during the big job.
type MemSample struct {
	AtS     float64 `json:"at_s"`
	Leader  string  `json:"leader"`
	RSSMiB  float64 `json:"rss_mib"`
	Backlog uint64  `json:"backlog_msgs"`
	Done    int     `json:"done"`
}

// Loaded is the loaded no-fault run: jobs keep both cores busy and nothing is killed. Every new
// term or lease break is a takeover of a live leader.
type Loaded struct {
	DurationS   float64 `json:"duration_s"`
	Jobs        int     `json:"jobs"`
	Exact       int     `json:"exact"`
	Elections   int     `json:"elections"`   // elected events after the first leader
	BrokeLeases int     `json:"broke_lease"` // broke_lease events
	Suspected   int     `json:"suspected"`   // suspected events (a follower missed heartbeats)
	CPUBusy     float64 `json:"cpu_busy"`    // CPU used ÷ (cores × wall time), all processes but Azurite
}

// Outage is the NATS-outage run: the nats-server process is killed mid-job and restarted.
// Its time lost leaves out the time down.
type Outage struct {
	ServerFault
	BrokeLeases int `json:"broke_lease"`
}

// NATSCluster is the 3-node NATS cluster run: R3 streams, workers on different nodes, one node
// stopped mid-job and restarted.
type NATSCluster struct {
	Nodes      int `json:"nodes"`
	Replicas   int `json:"replicas"`
	KilledNode int `json:"killed_node"`
	ServerFault
}

// ServerFault is a run with a server down mid-job: the job, its reference and what was lost.
type ServerFault struct {
	DownS         float64 `json:"down_s"`
	Job           string  `json:"job"`
	Exact         bool    `json:"exact"`
	LeaderChanges int     `json:"leader_changes"` // new terms during the job after the first
	MakespanS     float64 `json:"makespan_s"`
	ReferenceS    float64 `json:"reference_makespan_s"`
	TimeLostS     float64 `json:"time_lost_s"`

	Timeline *rig.Timeline `json:"-"` // the run drawn
}
