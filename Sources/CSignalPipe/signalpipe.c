#define _GNU_SOURCE
#include "CSignalPipe.h"

#include <errno.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
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

// sched_setattr(2) has no glibc wrapper before 2.41; the kernel's struct sched_attr as first defined
// (SCHED_ATTR_SIZE_VER0, 48 bytes; the utilization clamps came after).
struct sl_sched_attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
};
#define SL_SCHED_FLAG_RESET_ON_FORK 0x01


int sl_thread_set_slice(unsigned long long nanoseconds) {
#if defined(SYS_sched_setattr) && defined(SYS_sched_getattr)
    // Read, then written back with only the slice changed: the thread keeps its policy
    // (SCHED_OTHER or SCHED_BATCH), its nice and its reset-on-fork flag. A thread of another
    // class is left alone: for real-time and deadline threads sched_runtime means something
    // else, and the kernel applies a slice to fair (NORMAL, BATCH) threads only, so SCHED_IDLE
    // would report success and keep its slice.
    struct sl_sched_attr attr;
    memset(&attr, 0, sizeof attr);
    if (syscall(SYS_sched_getattr, 0, &attr, sizeof attr, 0) != 0) return -1;
    if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) {
        errno = EINVAL;
        return -1;
    }
    attr.size = sizeof attr;
    attr.sched_flags &= SL_SCHED_FLAG_RESET_ON_FORK;  // not the utilization clamps (later fields)
    attr.sched_priority = 0;
    attr.sched_runtime = nanoseconds;
    attr.sched_deadline = 0;
    attr.sched_period = 0;
    return (int)syscall(SYS_sched_setattr, 0, &attr, 0);
#else
    (void)nanoseconds;
    errno = ENOSYS;
    return -1;
#endif
}

unsigned long long sl_thread_slice(void) {
#ifdef SYS_sched_getattr
    struct sl_sched_attr attr;
    memset(&attr, 0, sizeof attr);
    if (syscall(SYS_sched_getattr, 0, &attr, sizeof attr, 0) != 0) return 0;
    return attr.sched_runtime;
#else
    return 0;
#endif
}

int sl_thread_set_idle(void) {
    struct sched_param param;
    memset(&param, 0, sizeof param);
    return sched_setscheduler(0, SCHED_IDLE, &param);
}

int sl_thread_is_idle(void) {
    return sched_getscheduler(0) == SCHED_IDLE;
}
