#ifndef SL_SIGNAL_PIPE_H
#define SL_SIGNAL_PIPE_H

// The one async-signal-safe part of SignalEvents (SearchlightWire/SignalEvents.swift): a signal
// handler that writes the signal's number, one byte, to a pipe and does nothing else. In C, so
// that nothing the Swift runtime does (lazy globals, reference counting, allocation) can run in
// a handler that interrupts any thread, including a library's (OpenBLAS starts its workers
// before main).

/// Makes the pipe: both ends close-on-exec, the write end non-blocking. 0, or -1 with errno.
int sl_signal_pipe_open(int fds[2]);

/// Sets the pipe's write end (non-blocking, close-on-exec) the handler writes to. Once, before
/// the first `sl_signal_pipe_install`; never changed after.
void sl_signal_pipe_set_fd(int fd);

/// Installs the handler for `signal` (SA_RESTART, nothing else blocked while it runs), keeping
/// the previous action for `sl_signal_pipe_restore`. 0, or -1 with errno.
int sl_signal_pipe_install(int signal);

/// Puts back the action `sl_signal_pipe_install` replaced. 0, or -1 with errno.
int sl_signal_pipe_restore(int signal);

/// Linux 6.12 and later (EEVDF): asks for a time slice of `nanoseconds` (the kernel keeps it
/// within 0.1 to 100 ms) for the calling thread, keeping its policy (SCHED_OTHER or SCHED_BATCH;
/// a SCHED_IDLE, real-time or deadline thread is refused with EINVAL) and its nice.
/// A thread with a shorter slice than the running one preempts it when it wakes up, instead of
/// waiting for the running thread's slice (1.4 ms by default on two cores) to end; its share of
/// the CPU is unchanged. No privilege needed. 0, or -1 with errno (ENOSYS, EINVAL). Before 6.12 the kernel
/// ignores the slice of a fair thread and returns 0: read it back (`sl_thread_slice`).
/// 0 nanoseconds puts back the kernel's default. Here with the signal pipe only because it needs
/// C too (`syscall` is variadic).
int sl_thread_set_slice(unsigned long long nanoseconds);

/// The calling thread's time slice in nanoseconds (sched_getattr's sched_runtime), 0 where the
/// kernel does not say.
unsigned long long sl_thread_slice(void);

/// Puts the calling thread in the SCHED_IDLE policy (sched(7)): it runs only when nothing else
/// wants the CPU, and any other thread waking up preempts it at once. An unprivileged thread
/// cannot leave it again (RLIMIT_NICE 0). 0, or -1 with errno.
int sl_thread_set_idle(void);

/// 1 when the calling thread's policy is SCHED_IDLE, else 0.
int sl_thread_is_idle(void);

#endif
