// The child side of sl_spawn runs between fork() and execve() in a copy of a multithreaded
// process: only async-signal-safe calls (raw system calls, in effect) are allowed there, no
// malloc, no locks, no stdio. Everything it needs is prepared by the parent before fork.
//
// Why fork() and not vfork(): a vfork child shares the parent's memory and stack while the parent
// thread is suspended, so a signal handler or a compiler that spills across the returns-twice call
// can corrupt the daemon. posix_spawn avoids that with clone(CLONE_VM) on a separate stack, but it
// cannot set rlimits, priorities or the I/O class. fork() copies page tables, which costs a few
// milliseconds for a large daemon; launches are throttled to seconds apart, so that is fine.
#define _GNU_SOURCE
#include "CSpawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_execveat
#error "execveat(2) is needed (Linux 3.19)"
#endif

#ifndef SYS_close_range
#define SYS_close_range 436  // the same number on every architecture
#endif

// The child moves every descriptor it is given to this number or above before placing them at
// 0..3, so that a source which is itself 0..3 is never overwritten before it is copied.
#define SL_HIGH_FD 10
#define SL_KERNEL_NSIG 64  // signals the kernel knows; glibc's sigset_t is larger
#define SL_IOPRIO_WHO_PROCESS 1
#define SL_IOPRIO_CLASS_SHIFT 13
#define SL_IOPRIO_BE_LEVEL 4  // the kernel's default best-effort level (for nice 0)

// Tells the parent which step failed and with which errno, then exits without running atexit
// handlers or flushing stdio buffers copied from the parent.
__attribute__((noreturn)) static void sl_fail(int report_fd, int step, int detail) {
    int record[3] = {step, errno, detail};
    ssize_t n;
    do {
        n = write(report_fd, record, sizeof record);
    } while (n < 0 && errno == EINTR);
    _exit(127);
}

// Closes descriptors lo..hi. close_range(2) needs Linux 5.9; before that, a loop up to the
// descriptor limit (opendir on /proc/self/fd would allocate, which the child must not do).
static void sl_close_span(unsigned lo, unsigned hi) {
    if (lo > hi) return;
    if (syscall(SYS_close_range, lo, hi, 0) == 0) return;
    struct rlimit rl;
    unsigned limit = 1u << 20;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < limit) limit = (unsigned)rl.rlim_cur;
    for (unsigned fd = lo; fd <= hi && fd < limit; fd++) close((int)fd);
}

// Puts the given descriptors at 0..3 (dup2 leaves FD_CLOEXEC clear on the copy, and since every
// source was first moved to SL_HIGH_FD or above, no dup2 here is a no-op that would keep it set)
// and closes every other descriptor except the report pipe and the program's descriptor, which
// are close-on-exec (both moved up first too, so that no dup2 into 0..3 overwrites them).
static int sl_arrange_fds(const struct sl_spawn_request *a, int *report_fd, int *exec_fd) {
    int high[4];
    const int given[4] = {a->stdin_fd, a->stdout_fd, a->stderr_fd, a->ext_fd};
    int moved = fcntl(*report_fd, F_DUPFD_CLOEXEC, SL_HIGH_FD);
    if (moved < 0) return -1;
    *report_fd = moved;
    if (*exec_fd >= 0) {
        moved = fcntl(*exec_fd, F_DUPFD_CLOEXEC, SL_HIGH_FD);
        if (moved < 0) return -1;
        *exec_fd = moved;
    }
    for (int i = 0; i < 4; i++) {
        high[i] = given[i] < 0 ? -1 : fcntl(given[i], F_DUPFD_CLOEXEC, SL_HIGH_FD);
        if (given[i] >= 0 && high[i] < 0) return -1;
    }
    for (int i = 0; i < 4; i++) {
        if (high[i] < 0) {
            close(i);
        } else if (dup2(high[i], i) < 0) {
            return -1;
        }
    }
    // The descriptors kept above 3, in order; every gap between them is closed.
    unsigned keep[2] = {(unsigned)*report_fd, *exec_fd >= 0 ? (unsigned)*exec_fd : (unsigned)*report_fd};
    if (keep[0] > keep[1]) {
        unsigned t = keep[0];
        keep[0] = keep[1];
        keep[1] = t;
    }
    sl_close_span(4, keep[0] - 1);
    if (keep[1] > keep[0]) sl_close_span(keep[0] + 1, keep[1] - 1);
    sl_close_span(keep[1] + 1, ~0u);
    return 0;
}

// Writes `value` (>= 0) in decimal at `out`, NUL-terminated: no snprintf after fork.
static void sl_append_number(char *out, int value) {
    char digits[12];
    int n = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value > 0 && n < 11);
    while (n > 0) *out++ = digits[--n];
    *out = '\0';
}

// Opens a unit's StandardOutPath/StandardErrorPath as the child's (already final) user and puts
// it at `target`: appended to; O_NOFOLLOW, so that a symbolic link planted there is refused
// (ELOOP) instead of followed; O_NONBLOCK, so that a FIFO with no reader fails at once (ENXIO)
// instead of blocking the launch, cleared afterwards for the program; O_NOCTTY, because this
// session leader would otherwise take a terminal opened here as its controlling terminal.
static int sl_open_output(const char *path, int target) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0640);
    if (fd < 0) return -1;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) return -1;
    if (fd == target) return fcntl(fd, F_SETFD, 0);
    if (dup2(fd, target) < 0) return -1;
    close(fd);
    return 0;
}

// Applies the signal state, session, cgroup, descriptors, priorities, limits, identity, output
// files and working directory, then execs. Never returns.
__attribute__((noreturn)) static void sl_child(const struct sl_spawn_request *a, int report_fd) {
    // Dispositions first, while the parent's fully blocked mask still holds, so that no handler
    // inherited from the daemon can run here; then open the mask (the daemon blocks SIGTERM,
    // SIGINT and SIGHUP in its own threads, and an extension must not inherit that). The raw system call,
    // because glibc's sigaction refuses its own signals 32 and 33, and an ignored one would stay
    // ignored across exec. An all-zero kernel sigaction is SIG_DFL with no flags and an empty mask
    // whatever the architecture's field order.
    unsigned long dfl[4] = {0, 0, 0, 0};
    for (int sig = 1; sig <= SL_KERNEL_NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) syscall(SYS_rt_sigaction, sig, dfl, NULL, SL_KERNEL_NSIG / 8);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    // A session of its own, not only a process group: in the daemon's session an extension would
    // keep the controlling terminal of an operator who started the daemon by hand, and could
    // open /dev/tty and push keystrokes into that root shell (TIOCSTI). The new session's process
    // group id is the pid, so a signal to -pid still reaches what the extension starts.
    if (setsid() < 0) sl_fail(report_fd, SL_STEP_SETSID, 0);
    // Into the launch's own cgroup before anything else runs, so that every process the extension
    // starts, even one that leaves the session, is found and killed with the cgroup. "0" is the
    // writer itself; the descriptor was opened by the daemon, so this is checked as the daemon.
    if (a->cgroup_procs_fd >= 0) {
        ssize_t n;
        do {
            n = write(a->cgroup_procs_fd, "0", 1);
        } while (n < 0 && errno == EINTR);
        if (n != 1) sl_fail(report_fd, SL_STEP_CGROUP, 0);
    }
    int exec_fd = a->exec_fd;
    if (sl_arrange_fds(a, &report_fd, &exec_fd) < 0) sl_fail(report_fd, SL_STEP_DUP, 0);
    if (a->umask_value >= 0) umask((mode_t)a->umask_value);

    // Privileged settings (a lower nice, a higher hard limit) before the identity is dropped.
    if (a->nice_value != INT_MIN && setpriority(PRIO_PROCESS, 0, a->nice_value) < 0) {
        sl_fail(report_fd, SL_STEP_SETPRIORITY, 0);
    }
    if (a->io_class >= 0) {
        int level = a->io_class == SL_IOPRIO_CLASS_BE ? SL_IOPRIO_BE_LEVEL : 0;
        long value = ((long)a->io_class << SL_IOPRIO_CLASS_SHIFT) | level;
        if (syscall(SYS_ioprio_set, SL_IOPRIO_WHO_PROCESS, 0, value) < 0) {
            sl_fail(report_fd, SL_STEP_IOPRIO, 0);
        }
    }
    for (int i = 0; i < a->nlimits; i++) {
        struct rlimit rl = {(rlim_t)a->limits[i].soft, (rlim_t)a->limits[i].hard};
        if (setrlimit(a->limits[i].resource, &rl) < 0) {
            sl_fail(report_fd, SL_STEP_SETRLIMIT, a->limits[i].resource);
        }
    }

    // Raw system calls: glibc's setuid/setgid/setgroups signal every thread of the process to
    // change in step (the "setxid" broadcast), machinery that is not safe to run after fork; this
    // child has one thread, and the raw calls change exactly that thread.
    if (a->gid >= 0) {
        if (syscall(SYS_setgroups, (size_t)a->ngroups, a->groups) < 0) {
            sl_fail(report_fd, SL_STEP_SETGROUPS, 0);
        }
        if (syscall(SYS_setgid, (gid_t)a->gid) < 0) sl_fail(report_fd, SL_STEP_SETGID, 0);
    }
    if (a->uid >= 0 && syscall(SYS_setuid, (uid_t)a->uid) < 0) sl_fail(report_fd, SL_STEP_SETUID, 0);

    // The unit's output files, opened only now: as the extension's user, with that user's rights,
    // never the daemon's (a root daemon would append to any file a symbolic link names, and create
    // root-owned files wherever the unit's user points it).
    if (a->stdout_path != NULL && sl_open_output(a->stdout_path, 1) < 0) sl_fail(report_fd, SL_STEP_STDOUT_PATH, 0);
    if (a->stderr_path != NULL && sl_open_output(a->stderr_path, 2) < 0) sl_fail(report_fd, SL_STEP_STDERR_PATH, 0);

    // After the identity change, so that access to the directory is checked as the extension's
    // user (and a home directory on root-squashed NFS works).
    if (a->cwd != NULL && chdir(a->cwd) < 0) sl_fail(report_fd, SL_STEP_CHDIR, 0);

    if (exec_fd >= 0) {
        // The descriptor the daemon opened and checked: no path is looked up again, so a file
        // swapped in after the check is never what runs.
        syscall(SYS_execveat, exec_fd, "", a->argv, a->envp, AT_EMPTY_PATH);
        if (errno == ENOSYS) {
            // A seccomp filter (or a kernel before 3.19) without execveat: the descriptor's magic
            // link in /proc names the same open file, as glibc's fexecve does it.
            char link[32] = "/proc/self/fd/";
            sl_append_number(link + 14, exec_fd);
            execve(link, a->argv, a->envp);
        }
    } else {
        execve(a->path, a->argv, a->envp);
    }
    sl_fail(report_fd, SL_STEP_EXEC, 0);
}

static int sl_failed(struct sl_spawn_failure *out, int step, int error, int detail) {
    out->step = step;
    out->error = error;
    out->detail = detail;
    return -1;
}

int sl_spawn(const struct sl_spawn_request *request, pid_t *pid_out, struct sl_spawn_failure *failure_out) {
    // The child reports a failed step through this pipe; its write end closes on a successful
    // execve, so EOF in the parent means the child is running the new program.
    int report[2];
    if (pipe2(report, O_CLOEXEC) < 0) return sl_failed(failure_out, SL_STEP_PIPE, errno, 0);

    // Every signal blocked across fork, so that none of the daemon's handlers can run in the
    // child before it resets them.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        close(report[0]);
        sl_child(request, report[1]);
    }
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(report[1]);
    if (pid < 0) {
        close(report[0]);
        return sl_failed(failure_out, SL_STEP_FORK, fork_errno, 0);
    }

    int record[3];
    size_t got = 0;
    while (got < sizeof record) {
        ssize_t n = read(report[0], (char *)record + got, sizeof record - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(report[0]);
    if (got == sizeof record) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        return sl_failed(failure_out, record[0], record[1], record[2]);
    }
    *pid_out = pid;
    return 0;
}

int sl_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}

int sl_eventfd(void) {
    return eventfd(0, EFD_CLOEXEC);
}

int sl_open_path(const char *path) {
    return open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
}
