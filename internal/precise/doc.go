// Package precise sleeps for a duration to within the kernel's timer slack, where the Go runtime
// cannot.
//
// The runtime parks an idle process in epoll_wait, whose timeout has millisecond resolution: a
// timer due in 0.3 ms sleeps a whole millisecond when something else (a network read, another
// timer) woke the process in its last millisecond. In a worker, which hears from NATS hundreds
// of times a second, a 2 ms time.Timer takes 2.36–2.46 ms on average. The same timer takes
// 2.27 ms in a process doing nothing else, and 2.40 ms beside 1000 loopback reads a second. On Linux, Sleep arms a timerfd, which the runtime's poller waits on like a socket,
// so the wait ends when the kernel's high-resolution timer fires: 2.09–2.12 ms in both cases.
// Elsewhere it falls back to a time.Timer.
//
// The built-in job "sleep" (shards that stand in for work of a known length in load tests)
// sleeps with it, so an efficiency figure measures the system, not the runtime's timer
// rounding. docs/design.md ("Short shards") has the measurements.
package precise
