package election

import "time"

// SetProbeTimeout lets external tests lengthen one probe's bound (a probe that hangs).
func SetProbeTimeout(e *Elector, d time.Duration) { e.probeTimeout = d }

// AliveWait is how long a follower waits for a silent leader that answers probes (check).
const AliveWait = aliveWait
