// Package program runs a worker's registered programs as keyed jobs: a streaming contract in
// the manner of Hadoop Streaming, on the keyed machinery Go keyed jobs use.
//
// A program is registered on a worker as NAME=COMMAND (worker run --program); a job spec names
// only NAME, so nothing a submitter sends is ever executed. The contract:
//
//   - MAPAGG_ROLE is map, combine or reduce (and describe, once at start).
//   - map: the shard's input lines on stdin, one a line; key<TAB>value lines on stdout.
//   - combine and reduce: key<TAB>value lines sorted by key on stdin; key<TAB>value lines out.
//   - In keys and values, tab, newline, CR and backslash are written \t \n \r \\.
//   - MAPAGG_PARAMS holds the job's parameters (JSON); MAPAGG_JOB_ID, MAPAGG_SHARD (map and
//     combine) and MAPAGG_PARTITION (reduce) say what runs.
//
// A program that declares {"session": true} gets one process per job on a worker instead of one
// per task: MAPAGG_ROLE=session, and the job's tasks one after another on its stdin, each a
// "mapagg:task {json}" line and its input in length-prefixed frames, its output ended by a
// "mapagg:end <seq>" line (session.go). A failed task kills the process; the job's end, an idle
// timeout or the worker's stop closes its stdin.
//
// What is guaranteed: one process per task (or per job, with sessions), alive across its
// records, fed through buffered pipes from a goroutine that reads ahead; its own working directory, removed after; an environment built from an allow-list, so
// no secret of the worker reaches it; bounded stdout and stderr (the first lines of stderr go to
// the job's log, through the task's jobs.LoggerFrom); a time limit. A failure (exit
// status, malformed line, time limit) fails the task attempt with the exit status and the last
// lines of stderr, and retries as any task. What is not: isolation from the worker's user (the
// program runs as that user and may read what it can read).
package program
