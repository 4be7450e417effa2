package protocol

import "fmt"

// Blob layout in the jobs container. Every name of a job's blobs is made here.
//
//	<job-id>/spec.json          the submitted Spec (written once, If-None-Match)
//	<job-id>/plan-<epoch>/<p>   page p of the shards, as planned by the leader of that epoch
//	                            (stored plans only: an indexed plan stores nothing)
//	<job-id>/checkpoint         the Checkpoint (conditional writes, If-Match); its metadata is
//	                            the job's StatusRecord, set by the same write
//	<job-id>/result.json        the final result (a copy of Checkpoint.Result)
//	<job-id>/cancel             present when a user asked to cancel the job
//	<job-id>/partials/<i>-<a>   a large partial of shard i, attempt a
//	active/<job-id>             present while the job is planned and not finished: lets a new
//	                            leader find running jobs without listing every job ever run
const ActivePrefix = "active/"

func SpecBlob(id string) string       { return id + "/spec.json" }
func CheckpointBlob(id string) string { return id + "/checkpoint" }
func ResultBlob(id string) string     { return id + "/result.json" }
func CancelBlob(id string) string     { return id + "/cancel" }
func ActiveBlob(id string) string     { return ActivePrefix + id }
func PartialsPrefix(id string) string { return id + "/partials/" }

// PlanPrefix is the prefix of the pages of the plan written by the leader of epoch; the
// checkpoint's PlanEpoch says which plan a job follows, so two leaders racing to plan the same job
// can never mix their plans.
func PlanPrefix(id string, epoch uint64) string { return fmt.Sprintf("%s/plan-%d/", id, epoch) }

// PlanPageBlob names page p of the plan written by the leader of epoch.
func PlanPageBlob(id string, epoch uint64, p int) string {
	return fmt.Sprintf("%s%d", PlanPrefix(id, epoch), p)
}

// PartialBlob names a large partial of shard index, attempt.
func PartialBlob(id string, index, attempt int) string {
	return fmt.Sprintf("%s%d-%d", PartialsPrefix(id), index, attempt)
}
