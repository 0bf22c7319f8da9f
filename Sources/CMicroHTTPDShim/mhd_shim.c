#include "mhd_shim.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <unistd.h>

static int ss_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decoding of paths and query arguments that keeps "%00" as it is: a decoded NUL would
   cut the C string that libmicrohttpd hands over, so "/healthz%00/x" would reach /healthz. */
static size_t ss_unescape(void *cls, struct MHD_Connection *connection, char *text) {
    (void)cls;
    (void)connection;
    char *read = text;
    char *write = text;
    while (*read != '\0') {
        if (read[0] == '%' && read[1] != '\0' && read[2] != '\0') {
            int high = ss_hex(read[1]);
            int low = ss_hex(read[2]);
            if (high >= 0 && low >= 0 && (high | low) != 0) {
                *write++ = (char)(high * 16 + low);
                read += 3;
                continue;
            }
        }
        *write++ = *read++;
    }
    *write = '\0';
    return (size_t)(write - text);
}

struct MHD_Daemon *ss_start_daemon(const ss_daemon_config *config,
                                   MHD_AccessHandlerCallback handler, void *handler_cls,
                                   MHD_RequestCompletedCallback completed, void *completed_cls,
                                   void *(*uri_log)(void *cls, const char *uri, struct MHD_Connection *connection),
                                   void *uri_log_cls,
                                   char *error, size_t error_size) {
    struct addrinfo hints;
    struct addrinfo *found = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(config->host, NULL, &hints, &found);
    if (rc != 0 || found == NULL) {
        snprintf(error, error_size, "cannot resolve host '%s': %s", config->host, gai_strerror(rc));
        return NULL;
    }
    struct sockaddr_storage address;
    memset(&address, 0, sizeof address);
    unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
    if (found->ai_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&address;
        memcpy(in6, found->ai_addr, sizeof *in6);
        in6->sin6_port = htons(config->port);
        flags |= MHD_USE_IPv6;
    } else {
        struct sockaddr_in *in4 = (struct sockaddr_in *)&address;
        memcpy(in4, found->ai_addr, sizeof *in4);
        in4->sin_port = htons(config->port);
    }
    freeaddrinfo(found);

    struct MHD_OptionItem options[] = {
        {MHD_OPTION_SOCK_ADDR, 0, &address},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, completed_cls},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)config->connection_limit, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)config->connection_timeout, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)config->connection_memory_limit, NULL},
        {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)ss_unescape, NULL},
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)uri_log, uri_log_cls},
        /* The last two entries are optional: END when not wanted. Without
           LISTENING_ADDRESS_REUSE, libmicrohttpd sets only SO_REUSEADDR, so a port another
           process listens on makes the start fail. */
        {MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL},
        {MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)(config->thread_pool_size > 1 ? config->thread_pool_size : 0), NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    size_t next = 7;
    if (config->reuse_port) next++;
    if (config->thread_pool_size > 1) {
        options[next].option = MHD_OPTION_THREAD_POOL_SIZE;
        options[next].value = (intptr_t)config->thread_pool_size;
        options[next].ptr_value = NULL;
        next++;
    }
    options[next].option = MHD_OPTION_END;
    options[next].value = 0;
    options[next].ptr_value = NULL;
    errno = 0;
    struct MHD_Daemon *daemon = MHD_start_daemon(flags, config->port, NULL, NULL, handler, handler_cls,
                                                 MHD_OPTION_ARRAY, options, MHD_OPTION_END);
    if (daemon == NULL) {
        int saved = errno;
        /* libmicrohttpd does not say why; binding the same address ourselves tells. */
        int probe = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0) {
            int one = 1;
            (void)setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            socklen_t length = address.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
            if (bind(probe, (struct sockaddr *)&address, length) != 0) saved = errno;
            close(probe);
        }
        if (saved == EADDRINUSE) {
            snprintf(error, error_size,
                     "cannot listen on %s port %u: the port is already in use by another process "
                     "(set http.reusePort to share it on purpose)", config->host, (unsigned)config->port);
        } else {
            snprintf(error, error_size, "cannot listen on %s port %u: %s", config->host,
                     (unsigned)config->port, saved != 0 ? strerror(saved) : "libmicrohttpd refused to start");
        }
    }
    return daemon;
}

struct ss_value_end {
    const char *start;
    const char *end;
    const char *last;
};

static enum MHD_Result ss_track_end(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    struct ss_value_end *track = cls;
    const char *pointers[2] = {key, value};
    for (int i = 0; i < 2; i++) {
        const char *p = pointers[i];
        if (p == NULL || p < track->start || p >= track->end) continue;
        const char *stop = p + strnlen(p, (size_t)(track->end - p));
        if (stop > track->last) track->last = stop;
    }
    return MHD_YES;
}

int ss_header_block_is_clean(struct MHD_Connection *connection, const char *method, const char *version) {
    if (method == NULL || version == NULL) return 0;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (info == NULL || info->header_size == 0) return 0;
    struct ss_value_end track = {method, method + info->header_size, NULL};
    if (version < track.start || version >= track.end) return 0;
    track.last = version + strnlen(version, (size_t)(track.end - version));
    MHD_get_connection_values(connection, MHD_HEADER_KIND, ss_track_end, &track);
    const char *p = track.last;
    while (p < track.end && (*p == ' ' || *p == '\t')) p++;
    int line_end_bytes = 0;
    for (; p < track.end; p++) {
        if (*p != '\0' && *p != '\r' && *p != '\n') return 0;
        line_end_bytes++;
    }
    return line_end_bytes >= 2 && line_end_bytes <= 4;
}

uint16_t ss_daemon_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

int ss_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

int ss_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int ss_epoll_watch_hangup(int epoll_fd, int fd, uint64_t id) {
    struct epoll_event event;
    memset(&event, 0, sizeof event);
    event.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLONESHOT;
    event.data.u64 = id;
    return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event);
}

int ss_epoll_forget(int epoll_fd, int fd) {
    struct epoll_event unused;
    memset(&unused, 0, sizeof unused);
    return epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, &unused);
}

int ss_epoll_wait_ids(int epoll_fd, uint64_t *ids, int max, int timeout_ms) {
    struct epoll_event events[64];
    if (max > 64) max = 64;
    int count = epoll_wait(epoll_fd, events, max, timeout_ms);
    for (int i = 0; i < count; i++) ids[i] = events[i].data.u64;
    return count;
}
