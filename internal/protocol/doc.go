// Package protocol is the system's vocabulary: wire messages, stored formats and names.
//
// Everything that travels between processes or sits in storage is defined here: the job spec,
// shard and result messages, checkpoints, plan pages, control hints, the blob layout, NATS
// subjects and streams, and de-duplication ids. Every other package builds these names and
// formats through this one, so a format changes in one place.
//
// Guaranteed: each decoder rejects malformed input with an error and has a fuzz target; decoders
// of control hints ignore unknown fields, so mixed versions understand each other. Not
// guaranteed: authenticity (package bus adds and checks the MAC).
package protocol
