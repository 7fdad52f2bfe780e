// Fork/exec for Searchlight's extension processes, in C because the child of fork() in a
// multithreaded process may only make async-signal-safe calls before execve, and Swift code
// (retain/release, allocation, runtime locks) cannot promise that.
#ifndef CSPAWN_H
#define CSPAWN_H

#include <stdint.h>
#include <sys/types.h>

// The step of the launch that failed, reported in `sl_spawn_failure.step`.
#define SL_STEP_PIPE 1
#define SL_STEP_FORK 2
#define SL_STEP_DUP 3
#define SL_STEP_SETSID 4
#define SL_STEP_SETPRIORITY 5
#define SL_STEP_IOPRIO 6
#define SL_STEP_SETRLIMIT 7
#define SL_STEP_SETGROUPS 8
#define SL_STEP_SETGID 9
#define SL_STEP_SETUID 10
#define SL_STEP_CHDIR 11
#define SL_STEP_EXEC 12
#define SL_STEP_CGROUP 13
#define SL_STEP_STDOUT_PATH 14
#define SL_STEP_STDERR_PATH 15

// I/O scheduling classes of ioprio_set(2).
#define SL_IOPRIO_CLASS_BE 2
#define SL_IOPRIO_CLASS_IDLE 3

// One resource limit to apply in the child, both values final (the caller merges and clamps).
struct sl_rlimit {
    int resource;   // RLIMIT_*
    uint64_t soft;  // UINT64_MAX = unlimited
    uint64_t hard;
};

// Why a launch failed: the step, its errno, and for SL_STEP_SETRLIMIT the resource.
struct sl_spawn_failure {
    int step;
    int error;
    int detail;
};

// What to start and how. Every pointer must stay valid until sl_spawn returns.
struct sl_spawn_request {
    // The program: executed through `exec_fd` when it is >= 0 (execveat with AT_EMPTY_PATH, so
    // that exactly the file the caller opened and checked runs), else by `path`.
    const char *path;
    int exec_fd;
    char *const *argv;  // NULL-terminated
    char *const *envp;  // NULL-terminated
    const char *cwd;    // NULL keeps
    int umask_value;    // -1 keeps
    int nice_value;     // INT_MIN keeps
    int io_class;       // -1 keeps
    const struct sl_rlimit *limits;
    int nlimits;
    long long uid, gid;  // -1 keep (long long, so that every uid_t value fits); groups only with gid
    const gid_t *groups;
    int ngroups;
    // stdin, stdout, stderr and the extension socket (fd 3); -1: none (closed in the child).
    int stdin_fd, stdout_fd, stderr_fd, ext_fd;
    // Non-NULL: opened in the child after the identity change, as the child's user, appended to,
    // never through a symbolic link, without blocking (a FIFO with no reader fails at once);
    // they replace stdout_fd / stderr_fd.
    const char *stdout_path, *stderr_path;
    // >= 0: an open `cgroup.procs` of the cgroup the child moves itself into before anything else.
    int cgroup_procs_fd;
};

// Starts the program with every other descriptor closed, the signal mask empty and every
// disposition the default, as the leader of a new session (and so of its own process group, with
// no controlling terminal). Returns 0 once the child has exec'd, with its pid in *pid_out;
// returns -1 with *failure_out filled if any step failed (the failed child is already reaped).
int sl_spawn(const struct sl_spawn_request *request, pid_t *pid_out, struct sl_spawn_failure *failure_out);

// pipe2(fds, O_CLOEXEC), which Swift's Glibc module does not import (it is a GNU extension).
int sl_pipe_cloexec(int fds[2]);

// open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC): a descriptor to execute (sl_spawn_request.exec_fd)
// and fstat, which reads nothing of the file (O_PATH is a GNU name Swift's Glibc does not import).
int sl_open_path(const char *path);

// eventfd(0, EFD_CLOEXEC): wakes a thread waiting in poll(2) on it.
int sl_eventfd(void);

#endif
