package bus

// HealthLooks is how many times h's prober woke.
func HealthLooks(h *Health) uint64 { return h.looks.Load() }
