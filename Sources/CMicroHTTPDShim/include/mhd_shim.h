#ifndef STATESERVER_MHD_SHIM_H
#define STATESERVER_MHD_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <microhttpd.h>

/// Settings for ss_start_daemon. Every field has the exact C width MHD reads.
typedef struct ss_daemon_config {
    /// Numeric or named host to bind ("127.0.0.1", "::1", "0.0.0.0", "localhost").
    const char *host;
    uint16_t port;
    /// Worker threads, each with its own epoll set (0 or 1: a single internal thread).
    unsigned int thread_pool_size;
    /// Maximum concurrent connections over all workers.
    unsigned int connection_limit;
    /// Seconds of inactivity before an (unsuspended) connection is closed; 0 = never.
    unsigned int connection_timeout;
    /// Bytes of memory per connection (headers, read buffer, chunk buffer).
    size_t connection_memory_limit;
    /// Nonzero: share the port with other processes (SO_REUSEPORT). Zero: a port in use is an
    /// error at start.
    int reuse_port;
} ss_daemon_config;

/// Starts an epoll daemon with suspend/resume enabled. On failure returns NULL and writes a
/// reason into `error` (at most `error_size` bytes, NUL-terminated).
struct MHD_Daemon *ss_start_daemon(const ss_daemon_config *config,
                                   MHD_AccessHandlerCallback handler, void *handler_cls,
                                   MHD_RequestCompletedCallback completed, void *completed_cls,
                                   void *(*uri_log)(void *cls, const char *uri, struct MHD_Connection *connection),
                                   void *uri_log_cls,
                                   char *error, size_t error_size);

/// Whether the header block of the current request ended with an empty line.
///
/// libmicrohttpd 0.9.75 ends the header block at a line with an empty field name (": x",
/// "\0: x"), so what follows is read as a second request, and such a line never reaches the
/// header list. This reads the request head where libmicrohttpd keeps it (its read buffer, from
/// `method` for MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE bytes): after the end of the last field
/// value (or of the version) only optional blanks and line ends (CR, LF, or the NULs that
/// replaced them) may follow, at most two line ends' worth. Returns 0 when anything else is
/// there or the layout is not the one expected (fail closed).
int ss_header_block_is_clean(struct MHD_Connection *connection, const char *method, const char *version);

/// The port the daemon is bound to (useful with port 0), or 0 if unknown.
uint16_t ss_daemon_port(struct MHD_Daemon *daemon);

/// The socket of a connection (MHD_get_connection_info is variadic), or -1.
int ss_connection_fd(struct MHD_Connection *connection);

/// A small epoll wrapper for the hang-up watcher (epoll_event is a packed struct).
int ss_epoll_create(void);
/// Watches `fd` for the peer hanging up (EPOLLRDHUP | EPOLLHUP | EPOLLERR, one shot).
int ss_epoll_watch_hangup(int epoll_fd, int fd, uint64_t id);
int ss_epoll_forget(int epoll_fd, int fd);
/// Waits up to `timeout_ms`; writes the ids of ready registrations, returns their count.
int ss_epoll_wait_ids(int epoll_fd, uint64_t *ids, int max, int timeout_ms);

/// MHD_CONTENT_READER_END_OF_STREAM and _WITH_ERROR, which Swift cannot import as macros.
static const ssize_t ss_content_reader_end_of_stream = -1;
static const ssize_t ss_content_reader_end_with_error = -2;
/// MHD_SIZE_UNKNOWN.
static const uint64_t ss_size_unknown = UINT64_MAX;

#endif
