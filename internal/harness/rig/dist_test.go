package rig

import "testing"

func TestDist_NearestRank(t *testing.T) {
	var oneToTwenty []float64
	for i := 20; i >= 1; i-- {
		oneToTwenty = append(oneToTwenty, float64(i))
	}
	for _, c := range []struct {
		name string
		xs   []float64
		want Dist
	}{
		{"empty", nil, Dist{}},
		{"one", []float64{3}, Dist{N: 1, P50: 3, P90: 3, Max: 3, Min: 3}},
		{"twenty", oneToTwenty, Dist{N: 20, P50: 10, P90: 18, Max: 20, Min: 1}},
		{"ten", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, Dist{N: 10, P50: 5, P90: 9, Max: 10, Min: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Summarize(c.xs); got != c.want {
				t.Errorf("Summarize(%v) = %+v, want %+v", c.xs, got, c.want)
			}
		})
	}
}
