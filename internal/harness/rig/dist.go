package rig

import (
	"math"
	"slices"
)

// Dist is a distribution's summary.
type Dist struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	Max float64 `json:"max"`
	Min float64 `json:"min"`
}

// Summarize summarizes xs by nearest rank (p90 of 20 samples is the 18th smallest).
func Summarize(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return Dist{N: len(s), P50: rank(0.5), P90: rank(0.9), Max: s[len(s)-1], Min: s[0]}
}

// Single is one figure as a distribution of one (none unless ok).
func Single(x float64, ok bool) Dist {
	if !ok {
		return Dist{}
	}
	return Dist{N: 1, P50: x, P90: x, Max: x, Min: x}
}
