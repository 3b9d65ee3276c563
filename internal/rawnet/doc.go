// Package rawnet makes a TCP connection's reads and writes raw system
// calls, for the proxy's and the router's hot paths.
//
// Why: Go enters every ordinary system call through the scheduler's
// entersyscall, and entersyscall wakes the runtime's monitor thread
// (sysmon) when the whole process was idle. A proxy serving one client at a
// time is idle between every request and every backend response, so each
// query paid for a futex wake-up of sysmon, its nanosleep and its going
// back to sleep: several context switches per query where MySQL Router
// makes two (measured: docs/benchmarks-proxy.md, "Throughput and added
// latency").
//
// A read or write on a non-blocking socket never blocks, so it needs none
// of what entersyscall provides (handing the P to another thread while the
// call blocks). Wrap issues them with syscall.RawSyscall inside
// syscall.RawConn's Read and Write callbacks; when the socket is not ready
// (EAGAIN) the callback says so and the goroutine parks on the netpoller
// exactly as net.Conn's own Read and Write do. Deadlines, Close and the
// netpoller behave as for the wrapped connection.
//
// The cost: while only raw calls run, sysmon sleeps on, so it does not
// preempt a goroutine that computes for more than 10 ms. Any ordinary
// system call or timer anywhere in the process wakes it again; the proxy's
// sessions never compute for long.
package rawnet
