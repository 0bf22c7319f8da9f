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

/// One header field or query argument of a request, as libmicrohttpd keeps it: pointers into
/// its connection memory, valid until the request completes. `value` is NULL for a query
/// argument without `=`.
typedef struct ss_field {
    const char *name;
    size_t name_length;
    const char *value;
    size_t value_length;
} ss_field;

/// Why a request head is refused (see ss_read_head), or SS_HEAD_OK.
enum {
    SS_HEAD_OK = 0,
    /// The header block does not end where libmicrohttpd says (a line with an empty name).
    SS_HEAD_MALFORMED_BLOCK = 1,
    SS_HEAD_EMPTY_NAME = 2,
    SS_HEAD_NAME_NOT_TOKEN = 3,
    SS_HEAD_CONFLICTING_LENGTH = 4,
    SS_HEAD_BAD_LENGTH = 5,
    SS_HEAD_LENGTH_WITH_CODING = 6,
    SS_HEAD_UNSUPPORTED_CODING = 7,
    SS_HEAD_MISSING_HOST = 8,
    SS_HEAD_REPEATED_HOST = 9,
};

/// What ss_read_head found.
typedef struct ss_head {
    /// An SS_HEAD_ value: the first rule the head breaks, in the order they are listed.
    int problem;
    /// Nonzero when a Content-Length field was sent.
    int has_content_length;
    /// Its value when it is valid; values past UINT64_MAX count as UINT64_MAX.
    uint64_t content_length;
    /// Header fields of the request, all of them (only the first `capacity` are in `fields`).
    size_t field_count;
} ss_head;

/// Checks the framing of the current request's head in one pass over its header fields, and
/// lists them (in arrival order, duplicates included, names as sent) into `fields`, up to
/// `capacity`. The rules, each an SS_HEAD_ value, first broken first:
///
/// - The header block ends with an empty line. libmicrohttpd 0.9.75 ends the header block at a
///   line with an empty field name (": x", "\0: x"), so what follows is read as a second
///   request, and such a line never reaches the header list. This reads the request head where
///   libmicrohttpd keeps it (its read buffer, from `method` for
///   MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE bytes): after the end of the last field value (or
///   of the version) only optional blanks and line ends (CR, LF, or the NULs that replaced
///   them) may follow, at most two line ends' worth. Anything else, or a layout other than the
///   one expected, breaks it (fail closed).
/// - Every field name is a token (RFC 9110 5.6.2), and not empty.
/// - Content-Length fields all have the same value (byte for byte), a non-empty run of digits,
///   and come without Transfer-Encoding.
/// - Transfer-Encoding fields, split at commas and trimmed of blanks, name one coding only:
///   `chunked`, in any ASCII case.
/// - An HTTP/1.1 request has a Host field; no request has more than one.
void ss_read_head(struct MHD_Connection *connection, const char *method, const char *version,
                  ss_field *fields, size_t capacity, ss_head *head);

/// Lists the values of `kind` (query arguments, header fields) of the current request into
/// `fields`, up to `capacity`; returns how many there are.
size_t ss_collect_values(struct MHD_Connection *connection, enum MHD_ValueKind kind, ss_field *fields, size_t capacity);

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
