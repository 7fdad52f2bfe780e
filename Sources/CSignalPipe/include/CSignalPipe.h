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

#endif
