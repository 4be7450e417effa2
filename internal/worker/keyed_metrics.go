package worker

import "github.com/prometheus/client_golang/prometheus"

// KeyedStats counts what a worker's keyed tasks did.
type KeyedStats struct {
	MapTasks, ReduceTasks int64
	SpilledBytes          int64 // written to local spill files (map buffers, reduce merges)
	RunsMerged            int64 // runs read by reduce merges, intermediate ones included
	MapRunBytes           int64 // map runs stored
	ReduceInputBytes      int64 // map runs read by reduce tasks
	OutputBytes           int64 // output records stored
	OutputRecords         int64
	PeakTaskMemory        int64 // the most buffer memory one task held (bytes)
}

// KeyedStats returns the keyed tasks' counters so far.
func (w *Worker) KeyedStats() KeyedStats {
	k := &w.keyed
	return KeyedStats{MapTasks: k.mapTasks.Load(), ReduceTasks: k.reduceTasks.Load(), SpilledBytes: k.spilledBytes.Load(),
		RunsMerged: k.runsMerged.Load(), MapRunBytes: k.mapRunBytes.Load(), ReduceInputBytes: k.reduceInputBytes.Load(),
		OutputBytes: k.outputBytes.Load(), OutputRecords: k.outputRecords.Load(), PeakTaskMemory: k.peakTaskMemory.Load()}
}

// NewKeyedCollector returns the Prometheus metrics of keyed tasks (mapagg_keyed_*), read from
// the worker get returns (nil: not started yet, nothing reported).
func NewKeyedCollector(get func() *Worker) prometheus.Collector { return keyedCollector{get: get} }

type keyedCollector struct{ get func() *Worker }

var keyedDescs = []struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(KeyedStats) int64
}{
	{prometheus.NewDesc("mapagg_keyed_tasks_total", "Keyed tasks run, by kind (map, reduce).", nil, prometheus.Labels{"kind": "map"}), prometheus.CounterValue, func(s KeyedStats) int64 { return s.MapTasks }},
	{prometheus.NewDesc("mapagg_keyed_tasks_total", "Keyed tasks run, by kind (map, reduce).", nil, prometheus.Labels{"kind": "reduce"}), prometheus.CounterValue, func(s KeyedStats) int64 { return s.ReduceTasks }},
	{prometheus.NewDesc("mapagg_keyed_spilled_bytes_total", "Bytes keyed tasks spilled to local disk beyond their memory budget.", nil, nil), prometheus.CounterValue, func(s KeyedStats) int64 { return s.SpilledBytes }},
	{prometheus.NewDesc("mapagg_keyed_runs_merged_total", "Sorted runs read by reduce merges, intermediate ones included.", nil, nil), prometheus.CounterValue, func(s KeyedStats) int64 { return s.RunsMerged }},
	{prometheus.NewDesc("mapagg_keyed_map_run_bytes_total", "Bytes of map runs stored.", nil, nil), prometheus.CounterValue, func(s KeyedStats) int64 { return s.MapRunBytes }},
	{prometheus.NewDesc("mapagg_keyed_reduce_input_bytes_total", "Bytes of map runs read by reduce tasks.", nil, nil), prometheus.CounterValue, func(s KeyedStats) int64 { return s.ReduceInputBytes }},
	{prometheus.NewDesc("mapagg_keyed_output_bytes_total", "Bytes of output records stored.", nil, nil), prometheus.CounterValue, func(s KeyedStats) int64 { return s.OutputBytes }},
	{prometheus.NewDesc("mapagg_keyed_output_records_total", "Output records stored.", nil, nil), prometheus.CounterValue, func(s KeyedStats) int64 { return s.OutputRecords }},
	{prometheus.NewDesc("mapagg_keyed_task_memory_peak_bytes", "The most buffer memory one keyed task held.", nil, nil), prometheus.GaugeValue, func(s KeyedStats) int64 { return s.PeakTaskMemory }},
}

func (c keyedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range keyedDescs {
		ch <- d.desc
	}
}

func (c keyedCollector) Collect(ch chan<- prometheus.Metric) {
	w := c.get()
	if w == nil {
		return
	}
	s := w.KeyedStats()
	for _, d := range keyedDescs {
		ch <- prometheus.MustNewConstMetric(d.desc, d.kind, float64(d.value(s)))
	}
}
