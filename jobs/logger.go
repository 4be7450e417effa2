package jobs

import (
	"context"
	"log/slog"
)

// EnvWithLogger returns env with log as its Logger: what a worker hands one shard attempt. The
// result is a JobsEnv whose JobsContainer is env's (DefaultJobsContainer when env has none).
func EnvWithLogger(env Env, log *slog.Logger) Env {
	if log == nil {
		log = env.Logger()
	}
	return loggerEnv{Env: env, log: log}
}

type loggerEnv struct {
	Env
	log *slog.Logger
}

func (e loggerEnv) Logger() *slog.Logger { return e.log }

func (e loggerEnv) JobsContainer() string { return jobsContainer(e.Env) }

// EnvWithSlots returns env answering SlotsEnv with slots: what the leader hands Split. The result
// is a JobsEnv whose JobsContainer is env's (DefaultJobsContainer when env has none).
func EnvWithSlots(env Env, slots int) Env { return slotsEnv{Env: env, slots: slots} }

type slotsEnv struct {
	Env
	slots int
}

func (e slotsEnv) Slots() int { return e.slots }

func (e slotsEnv) JobsContainer() string { return jobsContainer(e.Env) }

// jobsContainer is env's jobs container (JobsEnv), or DefaultJobsContainer.
func jobsContainer(env Env) string {
	if je, ok := env.(JobsEnv); ok {
		return je.JobsContainer()
	}
	return DefaultJobsContainer
}

type loggerKey struct{}

// ContextWithLogger returns ctx carrying log, which LoggerFrom returns: how a worker hands its
// logger to code that gets no Env (a keyed job's Reduce).
func ContextWithLogger(ctx context.Context, log *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, log)
}

// LoggerFrom returns the logger of the task ctx belongs to: in a keyed job's Reduce on a worker,
// the one whose lines go to the job's log with the worker, partition (as the shard) and attempt;
// in Map, the same as env.Logger(). Outside a task it is slog.Default().
func LoggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.Default()
}
