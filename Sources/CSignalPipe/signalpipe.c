#define _GNU_SOURCE
#include "CSignalPipe.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#define SL_SIGNALS 65

// Written once before any handler is installed; read by the handler (a plain int load).
static volatile sig_atomic_t sl_fd = -1;
static struct sigaction sl_previous[SL_SIGNALS];
static int sl_saved[SL_SIGNALS];

// Async-signal-safe: write(2) only, errno as the interrupted code left it. The pipe is
// non-blocking: when it is full (64 KiB of signals nobody read yet) the byte is dropped, as the
// kernel coalesces a pending signal anyway.
static void sl_signal_pipe_handler(int signal) {
    int saved = errno;
    unsigned char byte = (unsigned char)signal;
    int fd = sl_fd;
    if (fd >= 0) {
        ssize_t n;
        do { n = write(fd, &byte, 1); } while (n < 0 && errno == EINTR);
    }
    errno = saved;
}

void sl_signal_pipe_set_fd(int fd) { sl_fd = fd; }

int sl_signal_pipe_open(int fds[2]) {
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    int flags = fcntl(fds[1], F_GETFL);
    if (flags < 0 || fcntl(fds[1], F_SETFL, flags | O_NONBLOCK) != 0) {
        int saved = errno;
        close(fds[0]);
        close(fds[1]);
        errno = saved;
        return -1;
    }
    return 0;
}

int sl_signal_pipe_install(int signal) {
    if (signal <= 0 || signal >= SL_SIGNALS) { errno = EINVAL; return -1; }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = sl_signal_pipe_handler;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    struct sigaction previous;
    if (sigaction(signal, &action, &previous) != 0) return -1;
    // Installed twice: the first action is the one to restore.
    if (!sl_saved[signal]) {
        sl_previous[signal] = previous;
        sl_saved[signal] = 1;
    }
    return 0;
}

int sl_signal_pipe_restore(int signal) {
    if (signal <= 0 || signal >= SL_SIGNALS || !sl_saved[signal]) { errno = EINVAL; return -1; }
    if (sigaction(signal, &sl_previous[signal], NULL) != 0) return -1;
    sl_saved[signal] = 0;
    return 0;
}
