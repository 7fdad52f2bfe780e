// The vector index's scratch files (VectorIndex): unnamed files in a directory, so that nothing of
// them outlives the process, whatever way it ends. See CVectorKernels.h.
#define _GNU_SOURCE
#include "CVectorKernels.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sl_open_unnamed_file(const char *directory) {
#ifdef O_TMPFILE
    int fd = open(directory, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
#endif
    // A file system without O_TMPFILE: a named file, unlinked at once (a crash in between leaves
    // one `.sl-vectors-*` file behind; nothing reads it back).
    size_t n = strlen(directory);
    char *path = malloc(n + 32);
    if (!path) return -1;
    snprintf(path, n + 32, "%s/.sl-vectors-XXXXXX", directory);
    int fd2 = mkostemp(path, O_CLOEXEC);
    if (fd2 >= 0) unlink(path);
    free(path);
    return fd2;
}

ptrdiff_t sl_copy_file_range(int in, int64_t *in_offset, int out, int64_t *out_offset, size_t length) {
    loff_t a = *in_offset, b = *out_offset;
    ssize_t n = copy_file_range(in, &a, out, &b, length, 0);
    *in_offset = a;
    *out_offset = b;
    return n;
}

int sl_punch_hole(int fd, int64_t offset, int64_t length) {
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length);
}
