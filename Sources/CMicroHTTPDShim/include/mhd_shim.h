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
    /// TLS (HTTPS only, through libmicrohttpd's GnuTLS): the certificate chain (the server's
    /// certificate first) and its private key, PEM text, NUL-terminated; both NULL: plain HTTP.
    /// Checked with ss_tls_check first. Read by libmicrohttpd only while the daemon starts.
    const char *tls_certificate;
    const char *tls_key;
    /// GnuTLS priority string for TLS (NULL: libmicrohttpd's default, "NORMAL").
    const char *tls_priorities;
    /// Called when a connection starts and when it closes (MHD_OPTION_NOTIFY_CONNECTION), or
    /// NULL for none (the per-address connection count uses it).
    MHD_NotifyConnectionCallback notify_connection;
    void *notify_connection_cls;
    /// Nonzero (plain HTTP only): event streams leave libmicrohttpd once their head is known
    /// (MicroHTTP's StreamSockets). Sets MHD_USE_TURBO, without which libmicrohttpd 0.9.75
    /// shuts down (SHUT_WR) a connection's socket when it closes it, which would end the
    /// stream's duplicate of that socket too.
    int detach_streams;
} ss_daemon_config;

/// What ss_tls_check learnt of the certificate it accepted.
typedef struct ss_tls_facts {
    /// The server certificate's validity (seconds since 1970), -1 when unknown.
    int64_t not_before;
    int64_t not_after;
    /// Certificates in the chain.
    unsigned int chain_length;
} ss_tls_facts;

/// Checks TLS settings the way ss_start_daemon uses them, so that a start fails with a reason
/// rather than libmicrohttpd's silent NULL: this libmicrohttpd is built with HTTPS
/// (MHD_FEATURE_TLS); `certificate` is PEM with at least one X.509 certificate; `key` is a PEM
/// private key without a passphrase (an encrypted key is refused, by its PEM header); the key is
/// the one of the first certificate; `priorities` (may be NULL) is a valid GnuTLS priority
/// string; GnuTLS accepts the pair as server credentials. Returns 0 and fills `facts`, or -1 and
/// writes the reason into `error` (NUL-terminated, at most `error_size` bytes), which starts with
/// "certificate:", "key:" or "priorities:" when one of them is at fault.
int ss_tls_check(const char *certificate, const char *key, const char *priorities, ss_tls_facts *facts, char *error,
                 size_t error_size);

/// At most this many query arguments are handed over. libmicrohttpd 0.9.75 stores each argument
/// in the connection's memory pool when it reads the request line; when the pool runs out it
/// neither answers nor calls the access handler (the connection hangs until its timeout, about
/// 110 short arguments with 8 KiB per connection). Past this count the arguments are dropped
/// before libmicrohttpd parses them, and the request is refused (400).
#define SS_MAX_QUERY_ARGUMENTS 64

/// A request target with a query may be at most this many bytes; a longer one's query is
/// dropped the same way, and the request refused (400). With 64 arguments of about 90 bytes
/// (a 6 KB target) the pool still held the arguments, but not the reply's head: libmicrohttpd
/// then failed to build it and left the connection open and silent (found by schemathesis, a
/// `GET .../history` with 63 long `limit` and `after` values).
#define SS_MAX_QUERY_TARGET_BYTES 2048

/// Called with the raw request target (before libmicrohttpd splits and decodes it) and the
/// number of query arguments in it (pieces between `&` after the first `?`); returns the
/// request's context (`*con_cls`). When `query_arguments` > SS_MAX_QUERY_ARGUMENTS, or the target
/// has a query and more than SS_MAX_QUERY_TARGET_BYTES bytes, the arguments are dropped after the
/// call. `control_in_target` is nonzero when the raw target has
/// a control character or a blank (bytes 0x01-0x20, 0x7F; libmicrohttpd keeps a bare CR in it).
typedef void *(*ss_uri_log_callback)(const char *uri, struct MHD_Connection *connection, size_t query_arguments,
                                     int control_in_target);

/// Starts an epoll daemon with suspend/resume enabled. `accept_policy` (with `accept_policy_cls`)
/// is asked about every new connection on the thread that accepted it; MHD_NO closes it at once
/// (the server refuses new connections that way while it stops: libmicrohttpd 0.9.75's
/// MHD_quiesce_daemon races its own worker threads in epoll mode and can abort the process).
/// Also installs ss_panic as libmicrohttpd's panic handler (once per process). With
/// `tls_certificate` and `tls_key`, serves HTTPS only (ss_tls_check runs first). On failure
/// returns NULL and writes a reason into `error` (at most `error_size` bytes, NUL-terminated).
struct MHD_Daemon *ss_start_daemon(const ss_daemon_config *config,
                                   MHD_AcceptPolicyCallback accept_policy, void *accept_policy_cls,
                                   MHD_AccessHandlerCallback handler, void *handler_cls,
                                   MHD_RequestCompletedCallback completed, void *completed_cls,
                                   ss_uri_log_callback uri_log,
                                   char *error, size_t error_size);

/// libmicrohttpd's panic handler (MHD_set_panic_func): writes one line to stderr,
/// `state-server: libmicrohttpd panic at FILE:LINE: REASON, the process ends`, then abort()s
/// (SIGABRT, which the fatal-signal handler reports too). libmicrohttpd calls it when its own
/// state is broken; it must not return.
void ss_panic(void *cls, const char *file, unsigned int line, const char *reason);

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
    /// Bytes hidden from the header list behind a NUL inside a field (`Content-Length: 0\0 38`).
    SS_HEAD_HIDDEN_BYTES = 10,
    /// A field value with a control character other than HTAB (a bare CR, ESC, ...).
    SS_HEAD_CONTROL_IN_VALUE = 11,
    /// The method is not a token (control characters, separators).
    SS_HEAD_BAD_METHOD = 12,
    /// Transfer-Encoding on an HTTP/1.0 request (RFC 9112 6.1: faulty framing).
    SS_HEAD_CODING_IN_HTTP10 = 13,
    /// A Host value that is not `host[:port]` (RFC 9112 3.2, RFC 3986 3.2.2).
    SS_HEAD_BAD_HOST = 14,
    /// More than one Authorization field (which one would count is ambiguous).
    SS_HEAD_REPEATED_AUTHORIZATION = 15,
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
/// - Between the fields libmicrohttpd lists only separators remain (NULs, blanks): bytes a NUL
///   inside a field hid from the list (`Content-Length: 0\0 38`, `chunked\0, gzip`) break it
///   (libmicrohttpd 0.9.75 cuts each value at its first NUL and reports that length, also
///   through MHD_get_connection_values_n, so only the buffer shows the rest).
/// - No field value has a control character other than HTAB (a bare CR is kept inside the
///   value by libmicrohttpd, and would end the line for the next reader).
/// - The method is a token.
/// - An HTTP/1.0 request has no Transfer-Encoding.
/// - The Host value is `host[:port]` (reg-name, IPv4 or a bracketed IP literal), possibly empty.
/// - At most one Authorization field.
///
/// `target` is the raw request target as the URI log callback saw it (NULL: unknown): between
/// the end of the method and it only blanks or NULs may be, or a NUL in the method hid bytes
/// (`PD\0OST /x`), which breaks the rule above on hidden bytes.
void ss_read_head(struct MHD_Connection *connection, const char *method, const char *target, const char *version,
                  ss_field *fields, size_t capacity, ss_head *head);

/// Lists the values of `kind` (query arguments, header fields) of the current request into
/// `fields`, up to `capacity`; returns how many there are.
size_t ss_collect_values(struct MHD_Connection *connection, enum MHD_ValueKind kind, ss_field *fields, size_t capacity);

/// The port the daemon is bound to (useful with port 0), or 0 if unknown.
uint16_t ss_daemon_port(struct MHD_Daemon *daemon);

/// The socket of a connection (MHD_get_connection_info is variadic), or -1.
int ss_connection_fd(struct MHD_Connection *connection);

/// The socket context the connection notification set for a connection (NULL when none).
void *ss_connection_socket_context(struct MHD_Connection *connection);

/// An IP address as 16 bytes: IPv6 as it is, IPv4 as an IPv4-mapped IPv6 address
/// (::ffff:a.b.c.d), so one form serves both. Writes `bytes` and returns 1 for an AF_INET or
/// AF_INET6 `address` of at least its family's size; returns 0 (bytes untouched) otherwise.
int ss_address_bytes(const struct sockaddr *address, size_t length, uint8_t bytes[16]);

/// The client address of a connection (its TCP peer), as ss_address_bytes gives it; 0 when
/// unknown (a connection that is not IP).
int ss_connection_address(struct MHD_Connection *connection, uint8_t bytes[16]);

/// Parses a numeric IPv4 (`192.0.2.1`) or IPv6 (`2001:db8::1`) address with inet_pton, into
/// the 16-byte form; returns 1, or 0 when `text` is not one.
int ss_parse_address(const char *text, uint8_t bytes[16]);

/// Writes the 16-byte form as text (an IPv4-mapped address as plain IPv4) into `text`, at
/// most `size` bytes with the NUL (46 is always enough); returns 1, or 0 on failure.
int ss_format_address(const uint8_t bytes[16], char *text, size_t size);

/// A small epoll wrapper for the hang-up watcher (epoll_event is a packed struct).
int ss_epoll_create(void);
/// Watches `fd` for the peer hanging up (EPOLLRDHUP | EPOLLHUP | EPOLLERR, one shot).
int ss_epoll_watch_hangup(int epoll_fd, int fd, uint64_t id);
int ss_epoll_forget(int epoll_fd, int fd);
/// Waits up to `timeout_ms`; writes the ids of ready registrations, returns their count.
int ss_epoll_wait_ids(int epoll_fd, uint64_t *ids, int max, int timeout_ms);

/// Event streams on their own sockets (MicroHTTP's StreamSockets): registrations by id, level
/// triggered, for input and the peer hanging up, and output while bytes wait.
int ss_epoll_watch_stream(int epoll_fd, int fd, uint64_t id, int want_write, int modify);
/// Waits up to `timeout_ms`; writes the ids and the events (ss_stream_* bits) of ready
/// registrations, returns their count.
int ss_epoll_wait_events(int epoll_fd, uint64_t *ids, uint32_t *events, int max, int timeout_ms);
static const uint32_t ss_stream_readable = 1;
static const uint32_t ss_stream_writable = 2;
static const uint32_t ss_stream_hangup = 4;
/// A duplicate of `fd` (close-on-exec), turned for streaming: TCP_CORK off (libmicrohttpd
/// may leave it on between responses), TCP_NODELAY on, and the send buffer bounded to
/// `send_buffer` bytes (ss_socket_send_buffer; 0: left to the kernel). -1 on failure.
int ss_stream_socket(int fd, int send_buffer);
/// Bounds the kernel's send buffer of socket `fd` (SO_SNDBUF) to `bytes`; 0 or less: leaves it
/// alone. Linux keeps twice the value (the other half for its bookkeeping; getsockopt reports
/// the doubled figure), caps it at net.core.wmem_max, and no longer grows the buffer by itself
/// (tcp_wmem autotuning) once it is set. Returns setsockopt's result.
int ss_socket_send_buffer(int fd, int bytes);
/// Gives up the connection of socket `fd` when bytes sent on it stay unacknowledged for
/// `milliseconds` (TCP_USER_TIMEOUT): a peer that vanished without closing (a network that
/// drops, a machine that dies) is found that long after the next write, not after minutes of
/// retransmissions. Returns setsockopt's result.
int ss_socket_user_timeout(int fd, unsigned int milliseconds);
/// Makes the close of socket `fd` an abort (SO_LINGER on, 0 s): the kernel sends RST and frees
/// what is still queued at once, rather than sending it all before a FIN (to a client that does
/// not read, never: the socket would stay an orphan holding its buffer). Applies to the close of
/// the last descriptor of the socket, whoever closes it. Returns setsockopt's result.
int ss_socket_reset_on_close(int fd);
/// Closes a stream's socket; with `reset` nonzero, as an abort (ss_socket_reset_on_close).
int ss_stream_close(int fd, int reset);
/// Cuts a connection another thread serves: writes `reply` (NULL: nothing) with one
/// non-blocking send, then shuts the socket down both ways (SHUT_RDWR), which its owner's
/// epoll reports at once as the end of the peer's input. The socket stays open: its owner
/// closes it.
void ss_cut_connection(int fd, const void *reply, size_t length);
/// Bytes of payload the TCP socket `fd` received so far (TCP_INFO's tcpi_bytes_received, Linux
/// 4.1 and later), or -1 when unknown.
int64_t ss_socket_bytes_received(int fd);
/// send() without SIGPIPE: the count written, or -1 with errno.
ssize_t ss_stream_send(int fd, const void *bytes, size_t count);
/// The bytes `count` bytes of body take on the wire: as one chunk of the chunked coding (hex
/// size, CRLF, the bytes, CRLF) when `chunked`, else as they are.
size_t ss_chunk_wire_length(size_t count, int chunked);
/// Sends `bytes` as ss_chunk_wire_length frames them, from `offset` bytes into that frame (one
/// sendmsg, no copy); returns the count written, or -1 with errno.
ssize_t ss_stream_send_chunk(int fd, const void *bytes, size_t count, size_t offset, int chunked);
/// Reads and drops what the peer sent: 1 while the socket is open, 0 when the peer closed
/// it or it failed.
int ss_stream_drain(int fd);
/// An eventfd (non-blocking, close-on-exec) and its signal and drain.
int ss_eventfd(void);
void ss_eventfd_signal(int fd);
void ss_eventfd_drain(int fd);
/// The `Date` header's value (IMF-fixdate) for now, into `text` (at least 32 bytes); returns
/// its length.
size_t ss_http_date(char *text, size_t size);
/// The reason phrase of `status` ("Unknown" when there is none).
const char *ss_reason_phrase(unsigned int status);

/// MHD_CONTENT_READER_END_OF_STREAM and _WITH_ERROR, which Swift cannot import as macros.
static const ssize_t ss_content_reader_end_of_stream = -1;
static const ssize_t ss_content_reader_end_with_error = -2;
/// MHD_SIZE_UNKNOWN.
static const uint64_t ss_size_unknown = UINT64_MAX;

#endif
