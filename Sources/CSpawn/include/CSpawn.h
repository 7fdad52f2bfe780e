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
#define SL_STEP_SETPGID 4
#define SL_STEP_SETPRIORITY 5
#define SL_STEP_IOPRIO 6
#define SL_STEP_SETRLIMIT 7
#define SL_STEP_SETGROUPS 8
#define SL_STEP_SETGID 9
#define SL_STEP_SETUID 10
#define SL_STEP_CHDIR 11
#define SL_STEP_EXEC 12

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

// Starts `path` with `argv` and `envp` (NULL-terminated), stdin/stdout/stderr from the given fds
// and `ext_fd` as fd 3 (-1: none); every other descriptor is closed, the signal mask is emptied
// and every disposition is the default, and the child leads its own process group.
// Optional settings: cwd (NULL keeps), umask_value (-1 keeps), nice_value (INT_MIN keeps),
// io_class (-1 keeps), limits, uid/gid (-1 keep; groups are set only with gid).
// Returns 0 once the child has exec'd, with its pid in *pid_out; returns -1 with *failure_out
// filled if any step failed (the failed child is already reaped).
int sl_spawn(const char *path, char *const argv[], char *const envp[],
             const char *cwd, int umask_value, int nice_value, int io_class,
             const struct sl_rlimit *limits, int nlimits,
             long long uid, long long gid, const gid_t *groups, int ngroups,
             int stdin_fd, int stdout_fd, int stderr_fd, int ext_fd,
             pid_t *pid_out, struct sl_spawn_failure *failure_out);

// pipe2(fds, O_CLOEXEC), which Swift's Glibc module does not import (it is a GNU extension).
int sl_pipe_cloexec(int fds[2]);

#endif
