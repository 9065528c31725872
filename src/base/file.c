/* Distrustful opening: see internal/file.h. A FIFO opened for reading would
 * block until a writer appears, and one opened for writing until a reader
 * does; O_NONBLOCK makes open return at once, fstat tells what the object is,
 * and only a regular file goes on, switched back to blocking I/O. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/internal/file.h"

const char *kiln_file_kind(unsigned mode) {
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

int kiln_fd_regular(int fd, const char *path, int64_t *size) {
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        kiln_fail(KILN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        kiln_fail(KILN_ERR_IO, "%s: not a regular file (%s)", path, kiln_file_kind(sb.st_mode));
        close(fd);
        return -1;
    }
    if (size) *size = (int64_t)sb.st_size;
    return fd;
}

int kiln_fd_blocking(int fd, const char *path) {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0) return 0;
    kiln_fail(KILN_ERR_IO, "%s: %s", path, strerror(errno));
    return -1;
}

int kiln_open_at_unchecked(int dir, const char *rel, const char *path) {
    int fd = openat(dir, rel, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) kiln_fail(KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return fd;
}

int kiln_open_read_at(int dir, const char *rel, const char *path, int64_t *size) {
    int fd = kiln_open_at_unchecked(dir, rel, path);
    return fd < 0 ? -1 : kiln_fd_regular(fd, path, size);
}

int kiln_open_read(const char *path, int64_t *size) {
    int fd = kiln_open_read_at(AT_FDCWD, path, path, size);
    if (fd >= 0 && kiln_fd_blocking(fd, path) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int kiln_open_write(const char *path, int append) {
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (append ? O_APPEND : 0), 0666);
    if (fd < 0) {
        /* a FIFO without a reader answers ENXIO: name it */
        struct stat sb;
        if (errno == ENXIO && stat(path, &sb) == 0) kiln_fail(KILN_ERR_IO, "%s: not a regular file (%s)", path, kiln_file_kind(sb.st_mode));
        else kiln_fail(KILN_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
        return -1;
    }
    fd = kiln_fd_regular(fd, path, NULL);
    if (fd >= 0 && kiln_fd_blocking(fd, path) != 0) {
        close(fd);
        return -1;
    }
    if (fd >= 0 && !append && ftruncate(fd, 0) != 0) {
        kiln_fail(KILN_ERR_IO, "%s: cannot truncate: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}
