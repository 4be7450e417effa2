// Package node is the embeddable worker node and its command line.
//
// A program that has job types of its own is a main that registers them and makes one call:
//
//	func main() {
//		reg := builtin.Registry() // or jobs.NewRegistry()
//		reg.Register(Squares{})   // your job types
//		node.Main(node.Options{Registry: reg})
//	}
//
// That binary has every command of the stock worker: run (join the cluster: process shards, and
// coordinate when elected leader), submit, status, result, output, cancel, wait, schedule, retry,
// delete, types, workers, health and env. `run` serves the HTTP job API and the dashboard
// (package observe) too. It assembles the election, the coordinator, the shard worker, the NATS
// release/poke wiring and the control responder (see below) from Config. Node.Serve does the
// same for a program that builds its Config itself instead of from flags and environment.
//
// # Validation where the type is known
//
// Every running worker answers, over core NATS, for the job types it has: "validate these
// parameters of type T" (one worker of those that have T answers, with the job's own error) and
// "which types do you have" (every worker answers). So `submit` from any binary, even one that
// lacks the type, checks the type and its parameters before it writes anything. A type the
// binary has is validated locally (no cluster needed); any other is asked of the cluster. A type
// no live worker has is refused with the list of types the running workers know. With no worker
// running, submit says so (ErrNoWorkers).
//
// # The cluster key
//
// Members authenticate every shard and result with a shared cluster key (bus.Keyring): a message
// no member produced is dead-lettered, never merged or run. `run` takes it from
// --cluster-key-file or CLUSTER_KEY, or else reads the blob ClusterKeyBlob of the lease container,
// creating a random one there at the first start (members that race all end with the same key).
// Config.ClusterKeys does the same for Serve. The key's id is logged at start; the key never is.
// Members with different keys refuse each other's messages and log both key ids.
//
// # Guarantees
//
// Exit status 0 on success, 1 on failure, 2 on a usage mistake (bad flag, bad value, missing
// setting, refused job), 3 when the job waited for was cancelled; every command has --help.
// A refused credential is named with what to check, never shown. Every flag of the connection
// settings also reads an environment variable (`worker env` lists them); the command line wins.
//
// Not guaranteed: the cluster's answer about a type reflects the workers running at that moment.
// If every worker that has the type leaves after its job was accepted, what becomes of the job is
// the cluster's shard routing's business (packages coordinator and worker), not submit's.
package node
