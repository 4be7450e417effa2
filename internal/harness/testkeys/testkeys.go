// Package testkeys gives tests one cluster key per test binary.
//
// It is a package of its own because testenv is imported by packages that bus imports.
package testkeys

import (
	"sync"

	"github.com/mapagg/mapagg/internal/bus"
)

// clusterKeys is one random cluster key per test binary.
var clusterKeys = sync.OnceValue(func() *bus.Keyring {
	k, err := bus.GenerateKey()
	if err != nil {
		panic(err)
	}
	r, err := bus.NewKeyring(k)
	if err != nil {
		panic(err)
	}
	return r
})

// Keys is the cluster key of this test binary: every bus a test connects as a cluster member
// (bus.Config.Keys) shares it, so they accept each other's shards and results.
func Keys() *bus.Keyring { return clusterKeys() }
