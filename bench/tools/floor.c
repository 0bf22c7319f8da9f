/*
 * The fan-out floor (issue 28, item 3): the cheapest server that does the same syscalls as
 * StateServer for an event fan-out, so that the server's CPU per delivery can be compared with
 * what the kernel alone costs on this machine.
 *
 *   cc -O2 -o floor bench/tools/floor.c
 *   floor [PORT]          0 or nothing: a free port; prints "listening on http://127.0.0.1:PORT"
 *
 * One thread, one epoll loop, 127.0.0.1 only. It speaks just enough HTTP/1.1 for
 * bench/tools/sse.py to use it exactly as it uses the real server:
 *
 *   GET  /v1/sessions/{id}/events...   an event stream: the server's response head (200,
 *                                      text/event-stream, chunked) and its `snapshot` event,
 *                                      byte for byte as the server sends them
 *   POST /v1/sessions/{id}/dispatch    the session's counter goes up by one; the `state` event
 *                                      the server would send for that (the same bytes, as one
 *                                      HTTP chunk, with the same incrementing id/version) is
 *                                      written to every stream of the session, one write()
 *                                      each, from this one loop; then the server's 200 answer
 *   GET  /healthz                      200 ok
 *
 * Sessions exist as soon as they are named (no tokens are checked): a session file for sse.py
 * can be any "ID TOKEN" lines. Keep-alive and pipelined requests are handled; bodies are read
 * by Content-Length and ignored. A write that does not go through at once (a full socket
 * buffer) keeps the rest for EPOLLOUT, so nothing is lost, but in the bench every event goes
 * out in its one write().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_ID 128
#define RBUF 4096

typedef struct Session {
    char id[MAX_ID];
    long version;
    int *subs; /* fds of its streams */
    int nsubs, cap;
    struct Session *next;
} Session;

typedef struct Conn {
    int fd;
    char *rbuf; /* RBUF bytes for requests; freed once the connection is an event stream */
    int rlen;
    char *out; /* what a write() left over */
    int outlen, outcap;
    Session *stream; /* set once the connection is an event stream */
    int subindex;
} Conn;

static Conn **conns;
static int nconns_cap;
static Session *sessions;
static int ep;

static Session *session(const char *id, size_t len) {
    Session *s;
    if (len >= MAX_ID) len = MAX_ID - 1;
    for (s = sessions; s; s = s->next)
        if (strlen(s->id) == len && memcmp(s->id, id, len) == 0) return s;
    s = calloc(1, sizeof *s);
    memcpy(s->id, id, len);
    s->next = sessions;
    sessions = s;
    return s;
}

static void close_conn(Conn *c) {
    if (c->stream) { /* swap-remove from its session's list */
        Session *s = c->stream;
        int last = s->subs[--s->nsubs];
        s->subs[c->subindex] = last;
        if (conns[last]) conns[last]->subindex = c->subindex;
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    conns[c->fd] = NULL;
    free(c->out);
    free(c->rbuf);
    free(c);
}

/* One write(); what does not go through waits for EPOLLOUT. Returns -1 if the conn is closed. */
static int send_bytes(Conn *c, const char *buf, int len) {
    if (c->outlen == 0) {
        ssize_t n = write(c->fd, buf, len);
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { close_conn(c); return -1; }
            n = 0;
        }
        if (n == len) return 0;
        buf += n;
        len -= n;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.fd = c->fd};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    }
    if (c->outlen + len > c->outcap) {
        c->outcap = (c->outlen + len) * 2;
        c->out = realloc(c->out, c->outcap);
    }
    memcpy(c->out + c->outlen, buf, len);
    c->outlen += len;
    return 0;
}

static void flush_out(Conn *c) {
    while (c->outlen > 0) {
        ssize_t n = write(c->fd, c->out, c->outlen);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (errno == EINTR) continue;
            close_conn(c);
            return;
        }
        memmove(c->out, c->out + n, c->outlen - n);
        c->outlen -= n;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = c->fd};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static int http_date(char *buf, size_t size) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    return (int)strftime(buf, size, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* An SSE event as one HTTP chunk: "<hex length>\r\n<event>\r\n". */
static int chunk(char *dst, size_t size, const char *event, int len) {
    return snprintf(dst, size, "%x\r\n%.*s\r\n", len, len, event);
}

static int open_stream(Conn *c, Session *s) {
    char date[64], buf[1024], ev[512];
    http_date(date, sizeof date);
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Type: text/event-stream\r\n"
                     "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n",
                     date);
    int e = snprintf(ev, sizeof ev,
                     "id: %ld\nevent: snapshot\ndata: {\"features\":{\"counter\":{\"version\":%ld,\"state\":{\"count\":%ld}}}}\n\n",
                     s->version, s->version, s->version);
    n += chunk(buf + n, sizeof buf - n, ev, e);
    if (s->nsubs == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->subs = realloc(s->subs, s->cap * sizeof(int));
    }
    c->stream = s;
    c->subindex = s->nsubs;
    s->subs[s->nsubs++] = c->fd;
    free(c->rbuf); /* a stream reads nothing more */
    c->rbuf = NULL;
    c->rlen = 0;
    return send_bytes(c, buf, n);
}

static int dispatch(Conn *c, Session *s) {
    char buf[1024], ev[512], date[64], body[256];
    long v = ++s->version;
    int e = snprintf(ev, sizeof ev,
                     "id: %ld\nevent: state\ndata: {\"feature\":\"counter\",\"version\":%ld,\"cause\":\"dispatch\","
                     "\"action\":{\"by\":1,\"type\":\"increment\"},\"state\":{\"count\":%ld},\"effect\":null}\n\n",
                     v, v, v);
    int n = chunk(buf, sizeof buf, ev, e);
    /* The fan-out: one write() per stream, from this loop. A stream closed meanwhile is
       swap-removed, so walk from the end. */
    for (int i = s->nsubs - 1; i >= 0; i--) {
        if (i >= s->nsubs) continue;
        Conn *sc = conns[s->subs[i]];
        if (sc) send_bytes(sc, buf, n);
    }
    int b = snprintf(body, sizeof body, "{\"feature\":\"counter\",\"version\":%ld,\"state\":{\"count\":%ld},\"effect\":null}\n", v, v);
    http_date(date, sizeof date);
    n = snprintf(buf, sizeof buf,
                 "HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Type: application/json\r\nETag: \"%ld\"\r\n"
                 "Cache-Control: no-store\r\nContent-Length: %d\r\n\r\n%s",
                 date, v, b, body);
    return send_bytes(c, buf, n);
}

static int simple(Conn *c, const char *status, const char *body) {
    char buf[512];
    int n = snprintf(buf, sizeof buf, "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s",
                     status, strlen(body), body);
    return send_bytes(c, buf, n);
}

/* Handles every complete request in the buffer. Returns -1 if the conn was closed. */
static int handle(Conn *c) {
    for (;;) {
        char *end = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
        if (!end) {
            if (c->rlen == RBUF) { close_conn(c); return -1; }
            return 0;
        }
        int head = end + 4 - c->rbuf;
        long clen = 0;
        char *cl = memmem(c->rbuf, head, "\r\nContent-Length:", 17);
        if (!cl) cl = memmem(c->rbuf, head, "\r\ncontent-length:", 17);
        if (cl) clen = strtol(cl + 17, NULL, 10);
        if (head + clen > RBUF) { close_conn(c); return -1; }
        if (c->rlen < head + clen) return 0;
        char *sp1 = memchr(c->rbuf, ' ', head);
        char *sp2 = sp1 ? memchr(sp1 + 1, ' ', head - (sp1 + 1 - c->rbuf)) : NULL;
        int rc = 0;
        if (!sp1 || !sp2) {
            close_conn(c);
            return -1;
        }
        char *path = sp1 + 1;
        int plen = sp2 - path;
        int is_get = memcmp(c->rbuf, "GET ", 4) == 0, is_post = memcmp(c->rbuf, "POST ", 5) == 0;
        const char *pre = "/v1/sessions/";
        size_t prelen = strlen(pre);
        if (plen > (int)prelen && memcmp(path, pre, prelen) == 0) {
            char *id = path + prelen;
            char *slash = memchr(id, '/', plen - prelen);
            if (slash) {
                char *rest = slash + 1;
                int rlen = path + plen - rest;
                Session *s = session(id, slash - id);
                if (is_get && rlen >= 6 && memcmp(rest, "events", 6) == 0 && (rlen == 6 || rest[6] == '?')) {
                    return open_stream(c, s);
                } else if (is_post && rlen == 8 && memcmp(rest, "dispatch", 8) == 0) {
                    rc = dispatch(c, s);
                } else {
                    rc = simple(c, "404 Not Found", "not found\n");
                }
            } else {
                rc = simple(c, "404 Not Found", "not found\n");
            }
        } else if (is_get && plen == 8 && memcmp(path, "/healthz", 8) == 0) {
            rc = simple(c, "200 OK", "ok\n");
        } else {
            rc = simple(c, "404 Not Found", "not found\n");
        }
        if (rc < 0) return -1;
        memmove(c->rbuf, c->rbuf + head + clen, c->rlen - head - clen);
        c->rlen -= head + clen;
    }
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 0;
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    nconns_cap = rl.rlim_cur > 1048576 ? 1048576 : (int)rl.rlim_cur;
    conns = calloc(nconns_cap, sizeof(Conn *));

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 4096) < 0) {
        perror("floor: bind/listen");
        return 1;
    }
    socklen_t alen = sizeof a;
    getsockname(ls, (struct sockaddr *)&a, &alen);
    printf("listening on http://127.0.0.1:%d (floor, pid %d, %d descriptors)\n", ntohs(a.sin_port), getpid(), nconns_cap);
    fflush(stdout);

    ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    struct epoll_event events[512];
    for (;;) {
        int n = epoll_wait(ep, events, 512, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            perror("floor: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == ls) {
                for (;;) {
                    int cfd = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
                    if (cfd < 0) break;
                    if (cfd >= nconns_cap) { close(cfd); continue; }
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    Conn *c = calloc(1, sizeof *c);
                    c->fd = cfd;
                    c->rbuf = malloc(RBUF);
                    conns[cfd] = c;
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = cfd};
                    epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &cev);
                }
                continue;
            }
            Conn *c = conns[fd];
            if (!c) continue;
            if (events[i].events & EPOLLOUT) {
                flush_out(c);
                if (!conns[fd]) continue;
            }
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (c->stream) { /* a stream: anything read is ignored, EOF closes it */
                    char sink[4096];
                    ssize_t r = read(fd, sink, sizeof sink);
                    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) close_conn(c);
                    continue;
                }
                ssize_t r = read(fd, c->rbuf + c->rlen, RBUF - c->rlen);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                    close_conn(c);
                    continue;
                }
                if (r > 0) {
                    c->rlen += r;
                    handle(c);
                }
            }
        }
    }
}
