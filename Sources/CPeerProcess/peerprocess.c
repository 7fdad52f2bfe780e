#define _GNU_SOURCE
#include "CPeerProcess.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* asm-generic/socket.h, Linux 6.5 */
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int sl_peer_pidfd(int socket) {
    int fd = -1;
    socklen_t len = sizeof fd;
    if (getsockopt(socket, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) != 0) return -1;
    if (len != sizeof fd || fd < 0) {
        errno = EINVAL;
        return -1;
    }
    return fd;
}

int sl_pidfd_open(int pid) {
    // pidfds are always close-on-exec.
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int sl_open_directory_path(const char *path) {
    return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

int sl_thread_seteuid(unsigned int uid) { return (int)syscall(SYS_setresuid, -1, uid, -1); }
int sl_thread_setegid(unsigned int gid) { return (int)syscall(SYS_setresgid, -1, gid, -1); }
