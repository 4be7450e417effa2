package rig

import "time"

// Until lists the samples taken up to t, in order.
func (s *Sampler) Until(t time.Time) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Sample
	for _, x := range s.samples {
		if !x.T.After(t) {
			out = append(out, x)
		}
	}
	return out
}
