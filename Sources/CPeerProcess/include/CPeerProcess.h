#ifndef SL_PEER_PROCESS_H
#define SL_PEER_PROCESS_H

// The two calls that pin a Unix socket's peer process (SearchlightSupervisor's PeerProcess), in
// C because Swift imports neither the variadic syscall(2) nor constants newer than the C library's
// headers.

/// A pidfd for the process at the other end of `socket` as the kernel recorded it when the
/// connection was made (SO_PEERPIDFD, Linux 6.5 and later): no pid can be reused under it.
/// The descriptor (close-on-exec), or -1 with errno (ENOPROTOOPT on older kernels).
int sl_peer_pidfd(int socket);

/// pidfd_open(2) of `pid` (Linux 5.3 and later): close-on-exec. The descriptor, or -1 with errno.
int sl_pidfd_open(int pid);

/// open(2) of the directory `path` as a path only (O_PATH | O_DIRECTORY | O_CLOEXEC): the file
/// system is not asked to open it. The descriptor, or -1 with errno.
int sl_open_directory_path(const char *path);

/// The calling thread's effective uid / gid only (setresuid(2)/setresgid(2) with the real and
/// saved ids unchanged, as the raw system calls: glibc's wrappers change every thread's). 0, or
/// -1 with errno.
int sl_thread_seteuid(unsigned int uid);
int sl_thread_setegid(unsigned int gid);

#endif
