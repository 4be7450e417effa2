// Package schedule fires a leader term's schedule ticks, each tick's job made exactly once.
package schedule
