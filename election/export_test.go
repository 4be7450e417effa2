package election

import "time"

// SetProbeTimeout lets external tests lengthen one probe's bound (a probe that hangs).
func SetProbeTimeout(e *Elector, d time.Duration) { e.probeTimeout = d }
