/* Opening files kiln did not make without trusting them: a FIFO, a device or
 * a folder where a regular file belongs is refused at once, never waited on
 * (open with O_NONBLOCK, check with fstat, then clear O_NONBLOCK). */
#ifndef KILN_BASE_FILE_H
#define KILN_BASE_FILE_H

#include <stdint.h>
#include "kiln/status.h"

/* A regular file for reading: the descriptor (blocking reads from here on) and
 * its size, or -1 with the message set ("PATH: cannot open: ...", "PATH: not
 * a regular file (a FIFO)"). */
int kiln_open_read(const char *path, int64_t *size);
/* As kiln_open_read, `rel` relative to the folder descriptor `dir` (or
 * AT_FDCWD), `path` naming it in messages, and O_NONBLOCK left set: Linux
 * ignores it when reading a regular file, and it spares the two fcntl calls
 * of a reader that opens many small files (a read that answers EAGAIN all the
 * same can call kiln_fd_blocking and read again). */
int kiln_open_read_at(int dir, const char *rel, const char *path, int64_t *size);
/* kiln_open_read_at's open without its check (O_NONBLOCK set, so it never
 * waits): for a reader of many small files, where the fstat is a tenth of a
 * file's cost, that calls kiln_fd_regular only when what read answers leaves
 * the question open. The descriptor, or -1 with the message set. */
int kiln_open_at_unchecked(int dir, const char *rel, const char *path);
/* fd checked to be a regular file (its size into *size when size is not
 * NULL): fd, or -1 with fd closed and the message set */
int kiln_fd_regular(int fd, const char *path, int64_t *size);
/* clears O_NONBLOCK: 0, or -1 with the message set */
int kiln_fd_blocking(int fd, const char *path);
/* A regular file for writing, created or truncated (or appended to): refuses
 * a FIFO or device in its place without blocking. -1 with the message set. */
int kiln_open_write(const char *path, int append);
/* what a file system object is, for messages: "a FIFO", "a folder", ... */
const char *kiln_file_kind(unsigned mode);

#endif
