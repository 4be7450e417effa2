package main

// SmallJob is the small-job scenario: primes below 2·10^7 in 200 shards on an idle cluster.
type SmallJob struct {
	Runs     int     `json:"runs"`
	Exact    int     `json:"exact"`
	Makespan Dist    `json:"makespan_s"` // submit to finished (checkpoint FinishedAt)
	Planned  Dist    `json:"planned_s"`  // submit to the job_planned event
	MedianS  float64 `json:"median_s"`
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
// cluster of the same size without it, over Runs rounds; the best makespan of each counts.
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
	Reference Dist `json:"reference_makespans_s"`
	Makespan  Dist `json:"makespans_s"`
	// Per job with the straggler: the results the slow worker published (duplicates included),
	// the shards dispatched more than once (backup tasks), the shards whose result was
	// published twice; and the shards backed up without the straggler.
	StragglerDone    Dist `json:"straggler_results"`
	Backups          Dist `json:"backups"`
	Duplicates       Dist `json:"duplicates"`
	ReferenceBackups Dist `json:"reference_backups"`
	// LastPercent is how long each job's last 1 % of shards took (from the result that left 1 %
	// without one to the last shard's first result), with and without the straggler: the tail,
	// hardly touched by the bulk's throughput.
	LastPercent          Dist `json:"last_percent_s"`
	ReferenceLastPercent Dist `json:"reference_last_percent_s"`
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

	timeline *timeline
}

// MemSample is one reading during the big job.
type MemSample struct {
	AtS     float64 `json:"at_s"`
	Leader  string  `json:"leader"`
	RSSMiB  float64 `json:"rss_mib"`
	Backlog uint64  `json:"backlog_msgs"`
	Done    int     `json:"done"`
}

// Loaded is the loaded no-fault run: jobs keep both cores busy; nothing is killed; every new term
// or lease break is a takeover of a live leader.
type Loaded struct {
	DurationS   float64 `json:"duration_s"`
	Jobs        int     `json:"jobs"`
	Exact       int     `json:"exact"`
	Elections   int     `json:"elections"`   // elected events after the first leader
	BrokeLeases int     `json:"broke_lease"` // broke_lease events
	Suspected   int     `json:"suspected"`   // suspected events (a follower missed heartbeats)
	CPUBusy     float64 `json:"cpu_busy"`    // CPU used ÷ (cores × wall time), all processes but Azurite
}

// Outage is the NATS-outage run: the NATS server process is killed mid-job and restarted.
type Outage struct {
	DownS         float64 `json:"down_s"`
	Job           string  `json:"job"`
	Exact         bool    `json:"exact"`
	LeaderChanges int     `json:"leader_changes"` // elected events during the job after the first leader
	BrokeLeases   int     `json:"broke_lease"`
	MakespanS     float64 `json:"makespan_s"`
	ReferenceS    float64 `json:"reference_makespan_s"`
	TimeLostS     float64 `json:"time_lost_s"` // makespan − reference − down time

	timeline *timeline
}

// NATSCluster is the 3-node NATS cluster run: R3 streams, workers on different nodes, one node
// killed mid-job and restarted.
type NATSCluster struct {
	Nodes         int     `json:"nodes"`
	Replicas      int     `json:"replicas"`
	KilledNode    int     `json:"killed_node"`
	DownS         float64 `json:"down_s"`
	Job           string  `json:"job"`
	Exact         bool    `json:"exact"`
	LeaderChanges int     `json:"leader_changes"`
	MakespanS     float64 `json:"makespan_s"`
	ReferenceS    float64 `json:"reference_makespan_s"`
	TimeLostS     float64 `json:"time_lost_s"`

	timeline *timeline
}
