package sim

import "syscall"

// RaiseFileLimit raises this process's open-file limit to its hard limit and returns it: a
// thousand members hold a few thousand sockets, and Azurite (a child, which inherits the limit)
// fails every call with a bare 500 once it runs out (Azure/Azurite#1967).
func RaiseFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	return l.Cur
}
