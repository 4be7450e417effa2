// Package jobread reads jobs a leader term does not hold: their state, result and retry.
package jobread
