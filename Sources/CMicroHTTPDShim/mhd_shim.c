#include "mhd_shim.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>

static int ss_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The raw target of the request this thread is reading: set by ss_uri_log, which libmicrohttpd
   calls just before it decodes that request's path (in place, from the same address) on the
   same thread. */
static __thread const char *ss_raw_target;

/* Percent-decoding of query arguments that keeps "%00" as it is: a decoded NUL would cut the C
   string that libmicrohttpd hands over. The path itself is not decoded here: it is handed over
   as sent, split at its "/" and then decoded segment by segment (MicroHTTP's router), so that
   "/v1/sessions/ID%2Fstate" stays one segment "ID/state". */
static size_t ss_unescape(void *cls, struct MHD_Connection *connection, char *text) {
    (void)cls;
    (void)connection;
    if (text == ss_raw_target) {
        ss_raw_target = NULL;
        return strlen(text);
    }
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

/* libmicrohttpd's URI log callback: counts the query arguments, hands the raw target to the
   server's callback (which makes the request's context), then drops the arguments when there are
   too many for the connection's memory pool (see SS_MAX_QUERY_ARGUMENTS). libmicrohttpd parses
   the arguments in its own read buffer after this call, starting after the "?"; the buffer is
   writable (libmicrohttpd writes NULs into it itself). */
static void *ss_uri_log(void *cls, const char *uri, struct MHD_Connection *connection) {
    ss_uri_log_callback callback = (ss_uri_log_callback)cls;
    ss_raw_target = uri;
    size_t arguments = 0;
    int control = 0;
    for (const char *p = uri; p != NULL && *p != '\0'; p++) {
        if ((unsigned char)*p <= 0x20 || *p == 0x7F) {
            control = 1;
            break;
        }
    }
    const char *query = uri == NULL ? NULL : strchr(uri, '?');
    if (query != NULL && query[1] != '\0') {
        arguments = 1;
        for (const char *p = query + 1; *p != '\0'; p++) {
            if (*p == '&') arguments++;
        }
    }
    void *context = callback(uri, connection, arguments, control);
    if (query != NULL && (arguments > SS_MAX_QUERY_ARGUMENTS || strlen(uri) > SS_MAX_QUERY_TARGET_BYTES)) ((char *)query)[1] = '\0';
    return context;
}

void ss_panic(void *cls, const char *file, unsigned int line, const char *reason) {
    (void)cls;
    char text[512];
    size_t reason_length = reason == NULL ? 0 : strlen(reason);
    /* One line: the reason without its trailing line ends (libmicrohttpd's often end in "\n"). */
    while (reason_length > 0 && (reason[reason_length - 1] == '\n' || reason[reason_length - 1] == '\r')) reason_length--;
    int length = snprintf(text, sizeof text, "state-server: libmicrohttpd panic at %s:%u: %.*s, the process ends\n",
                          file == NULL ? "?" : file, line, (int)(reason_length > 300 ? 300 : reason_length),
                          reason == NULL ? "" : reason);
    if (length > 0) {
        size_t size = (size_t)length < sizeof text ? (size_t)length : sizeof text - 1;
        ssize_t ignored = write(STDERR_FILENO, text, size);
        (void)ignored;
    }
    abort();
}

int ss_tls_check(const char *certificate, const char *key, const char *priorities, ss_tls_facts *facts, char *error,
                 size_t error_size) {
    memset(facts, 0, sizeof *facts);
    facts->not_before = -1;
    facts->not_after = -1;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(error, error_size, "this libmicrohttpd is built without HTTPS support (MHD_FEATURE_TLS); "
                                    "serve plain HTTP behind a proxy that terminates TLS");
        return -1;
    }
    if (certificate == NULL || key == NULL) {
        snprintf(error, error_size, "TLS needs both a certificate and a key");
        return -1;
    }
    /* An encrypted key would need a passphrase at every start: refused, by its PEM header
       (PKCS#8 "ENCRYPTED PRIVATE KEY", or the legacy "Proc-Type: 4,ENCRYPTED"). */
    if (strstr(key, "-----BEGIN ENCRYPTED PRIVATE KEY-----") != NULL || strstr(key, "Proc-Type: 4,ENCRYPTED") != NULL) {
        snprintf(error, error_size, "key: the private key is encrypted with a passphrase; give it unencrypted "
                                    "(e.g. `openssl pkey -in KEY -out KEY.plain`) and protect the file by its permissions");
        return -1;
    }
    int result = -1;
    gnutls_x509_crt_t *chain = NULL;
    unsigned int chain_length = 0;
    gnutls_x509_privkey_t private_key = NULL;
    gnutls_certificate_credentials_t credentials = NULL;
    gnutls_priority_t cache = NULL;
    gnutls_datum_t certificate_text = {(unsigned char *)certificate, (unsigned int)strlen(certificate)};
    gnutls_datum_t key_text = {(unsigned char *)key, (unsigned int)strlen(key)};

    int rc = gnutls_x509_crt_list_import2(&chain, &chain_length, &certificate_text, GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0 || chain_length == 0) {
        snprintf(error, error_size, "certificate: not a PEM X.509 certificate (\"-----BEGIN CERTIFICATE-----\"): %s",
                 rc < 0 ? gnutls_strerror(rc) : "no certificate in it");
        goto done;
    }
    facts->chain_length = chain_length;
    facts->not_before = (int64_t)gnutls_x509_crt_get_activation_time(chain[0]);
    facts->not_after = (int64_t)gnutls_x509_crt_get_expiration_time(chain[0]);

    rc = gnutls_x509_privkey_init(&private_key);
    if (rc >= 0) rc = gnutls_x509_privkey_import2(private_key, &key_text, GNUTLS_X509_FMT_PEM, NULL, 0);
    if (rc < 0) {
        snprintf(error, error_size, "key: not a PEM private key (\"-----BEGIN PRIVATE KEY-----\", RSA or EC): %s",
                 gnutls_strerror(rc));
        goto done;
    }

    unsigned char certificate_id[64];
    unsigned char key_id[64];
    size_t certificate_id_size = sizeof certificate_id;
    size_t key_id_size = sizeof key_id;
    if (gnutls_x509_crt_get_key_id(chain[0], GNUTLS_KEYID_USE_SHA256, certificate_id, &certificate_id_size) < 0 ||
        gnutls_x509_privkey_get_key_id(private_key, GNUTLS_KEYID_USE_SHA256, key_id, &key_id_size) < 0 ||
        certificate_id_size != key_id_size || memcmp(certificate_id, key_id, key_id_size) != 0) {
        snprintf(error, error_size, "key: the private key does not belong to the certificate (the first one in its file)");
        goto done;
    }

    if (priorities != NULL) {
        const char *where = NULL;
        rc = gnutls_priority_init(&cache, priorities, &where);
        if (rc < 0) {
            snprintf(error, error_size, "priorities: not a valid GnuTLS priority string at '%.60s': %s",
                     where == NULL ? priorities : where, gnutls_strerror(rc));
            goto done;
        }
    }

    /* What libmicrohttpd itself does with the pair when it starts. */
    rc = gnutls_certificate_allocate_credentials(&credentials);
    if (rc >= 0) rc = gnutls_certificate_set_x509_key_mem(credentials, &certificate_text, &key_text, GNUTLS_X509_FMT_PEM);
    if (rc < 0) {
        snprintf(error, error_size, "GnuTLS refuses the certificate and key: %s", gnutls_strerror(rc));
        goto done;
    }
    result = 0;

done:
    if (cache != NULL) gnutls_priority_deinit(cache);
    if (credentials != NULL) gnutls_certificate_free_credentials(credentials);
    if (private_key != NULL) gnutls_x509_privkey_deinit(private_key);
    for (unsigned int i = 0; i < chain_length; i++) gnutls_x509_crt_deinit(chain[i]);
    gnutls_free(chain);
    return result;
}

struct MHD_Daemon *ss_start_daemon(const ss_daemon_config *config,
                                   MHD_AcceptPolicyCallback accept_policy, void *accept_policy_cls,
                                   MHD_AccessHandlerCallback handler, void *handler_cls,
                                   MHD_RequestCompletedCallback completed, void *completed_cls,
                                   ss_uri_log_callback uri_log,
                                   char *error, size_t error_size) {
    MHD_set_panic_func(ss_panic, NULL);
    int tls = config->tls_certificate != NULL || config->tls_key != NULL;
    if (tls) {
        ss_tls_facts facts;
        if (ss_tls_check(config->tls_certificate, config->tls_key, config->tls_priorities, &facts, error, error_size) != 0)
            return NULL;
    }
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
    if (tls) flags |= MHD_USE_TLS;
    if (config->detach_streams && !tls) flags |= MHD_USE_TURBO;
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

    /* Room for the optional entries at the end: address reuse, thread pool, TLS (3), connection notices, END. */
    struct MHD_OptionItem options[16] = {
        {MHD_OPTION_SOCK_ADDR, 0, &address},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, completed_cls},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)config->connection_limit, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)config->connection_timeout, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)config->connection_memory_limit, NULL},
        {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)ss_unescape, NULL},
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)ss_uri_log, (void *)uri_log},
        /* Optional: overwritten when not wanted. Without LISTENING_ADDRESS_REUSE,
           libmicrohttpd sets only SO_REUSEADDR, so a port another process listens on makes the
           start fail. */
        {MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL},
    };
    size_t next = 7;
    if (config->reuse_port) next++;
    if (config->thread_pool_size > 1) {
        options[next].option = MHD_OPTION_THREAD_POOL_SIZE;
        options[next].value = (intptr_t)config->thread_pool_size;
        options[next].ptr_value = NULL;
        next++;
    }
    if (tls) {
        /* Read (and copied into GnuTLS's credentials) while the daemon starts, not after. */
        options[next++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)config->tls_certificate};
        options[next++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)config->tls_key};
        if (config->tls_priorities != NULL)
            options[next++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)config->tls_priorities};
    }
    if (config->notify_connection != NULL) {
        options[next].option = MHD_OPTION_NOTIFY_CONNECTION;
        options[next].value = (intptr_t)config->notify_connection;
        options[next].ptr_value = config->notify_connection_cls;
        next++;
    }
    options[next].option = MHD_OPTION_END;
    options[next].value = 0;
    options[next].ptr_value = NULL;
    errno = 0;
    struct MHD_Daemon *daemon = MHD_start_daemon(flags, config->port, accept_policy, accept_policy_cls, handler, handler_cls,
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

/* tchar of RFC 9110 section 5.6.2, by byte: ALPHA, DIGIT and !#$%&'*+-.^_`|~ */
static const unsigned char ss_token_bytes[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* Whether `text` (`length` bytes) is `lower` (lower-case ASCII) in any ASCII case. */
static int ss_equal_caseless(const char *text, size_t length, const char *lower) {
    size_t i = 0;
    for (; i < length; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + ('a' - 'A'));
        if (lower[i] == '\0' || c != (unsigned char)lower[i]) return 0;
    }
    return lower[i] == '\0';
}

/* State of the one pass over a request's header fields (ss_read_head). */
struct ss_head_pass {
    /* The request head in libmicrohttpd's read buffer, and the end of the last string in it. */
    const char *start;
    const char *end;
    const char *last;
    ss_field *fields;
    size_t capacity;
    size_t count;
    /* The first field whose name is empty or not a token (SS_HEAD_OK: none). */
    int name_problem;
    const char *length;
    size_t length_size;
    int conflicting_lengths;
    /* Transfer codings over every Transfer-Encoding field (each field: commas + 1), and the
       first of them, without blanks around it. */
    size_t codings;
    const char *coding;
    size_t coding_size;
    size_t hosts;
    const char *host;
    size_t host_size;
    size_t authorizations;
    /* Where the previous string in the buffer ended: between it and the next field's name or
       value only separators may be (NULs for line ends and the colon, blanks). */
    const char *previous_end;
    int hidden_bytes;
    int control_in_value;
};

/* Whether the buffer bytes from the previous string's end to `p` are all separators, then moves
   the end past `p`'s string. Pointers outside the head (none seen with 0.9.75) are not judged. */
static void ss_check_gap(struct ss_head_pass *pass, const char *p, size_t length, int before_value) {
    if (p == NULL || pass->previous_end == NULL || p < pass->start || p >= pass->end) return;
    if (p < pass->previous_end) {
        /* Strings out of order: not the layout this check knows. */
        pass->hidden_bytes = 1;
        return;
    }
    /* Before a name: the line end, one or two NULs (LF, CR LF); a value keeps its trailing
       blanks, so a blank here came after a NUL sent inside the value. Before a value: the NUL
       that replaced the colon, then the blanks libmicrohttpd skipped. */
    int nuls = 0;
    int blanks = 0;
    for (const char *q = pass->previous_end; q < p; q++) {
        if (*q == '\0') {
            nuls++;
        } else if (*q == ' ' || *q == '\t') {
            blanks++;
        } else {
            pass->hidden_bytes = 1;
            break;
        }
        if (before_value ? (nuls > 1 || (nuls == 1 && blanks > 0 && *q == '\0')) : (nuls > 2 || blanks > 0)) {
            pass->hidden_bytes = 1;
            break;
        }
    }
    const char *stop = p + length;
    if (stop > pass->end) stop = pass->end;
    pass->previous_end = stop;
}

static void ss_track_end(struct ss_head_pass *pass, const char *p, size_t length) {
    if (p == NULL || p < pass->start || p >= pass->end) return;
    const char *stop = p + length;
    if (stop > pass->end) stop = p + strnlen(p, (size_t)(pass->end - p));
    if (stop > pass->last) pass->last = stop;
}

static enum MHD_Result ss_head_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    struct ss_head_pass *pass = cls;
    if (key == NULL) return MHD_YES;
    size_t key_length = strlen(key);
    size_t value_length = value == NULL ? 0 : strlen(value);
    ss_track_end(pass, key, key_length);
    ss_track_end(pass, value, value_length);
    ss_check_gap(pass, key, key_length, 0);
    if (value != NULL) ss_check_gap(pass, value, value_length, 1);
    for (size_t i = 0; i < value_length; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7F) {
            pass->control_in_value = 1;
            break;
        }
    }
    if (pass->count < pass->capacity) {
        ss_field *field = &pass->fields[pass->count];
        field->name = key;
        field->name_length = key_length;
        field->value = value == NULL ? "" : value;
        field->value_length = value_length;
    }
    pass->count++;
    if (pass->name_problem != SS_HEAD_OK) return MHD_YES;
    if (key_length == 0) {
        pass->name_problem = SS_HEAD_EMPTY_NAME;
        return MHD_YES;
    }
    for (size_t i = 0; i < key_length; i++) {
        if (!ss_token_bytes[(unsigned char)key[i]]) {
            pass->name_problem = SS_HEAD_NAME_NOT_TOKEN;
            return MHD_YES;
        }
    }
    const char *text = value == NULL ? "" : value;
    if (key_length == 14 && ss_equal_caseless(key, key_length, "content-length")) {
        if (pass->length == NULL) {
            pass->length = text;
            pass->length_size = value_length;
        } else if (value_length != pass->length_size || memcmp(text, pass->length, value_length) != 0) {
            pass->conflicting_lengths = 1;
        }
    } else if (key_length == 17 && ss_equal_caseless(key, key_length, "transfer-encoding")) {
        const char *item = text;
        const char *stop = text + value_length;
        for (;;) {
            const char *comma = memchr(item, ',', (size_t)(stop - item));
            const char *item_end = comma == NULL ? stop : comma;
            if (pass->codings == 0) {
                const char *a = item;
                const char *b = item_end;
                while (a < b && (*a == ' ' || *a == '\t')) a++;
                while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
                pass->coding = a;
                pass->coding_size = (size_t)(b - a);
            }
            pass->codings++;
            if (comma == NULL) break;
            item = comma + 1;
        }
    } else if (key_length == 4 && ss_equal_caseless(key, key_length, "host")) {
        pass->hosts++;
        pass->host = text;
        pass->host_size = value_length;
    } else if (key_length == 13 && ss_equal_caseless(key, key_length, "authorization")) {
        pass->authorizations++;
    }
    return MHD_YES;
}

/* unreserved / sub-delims of RFC 3986, the bytes of a reg-name besides pct-encoded ones. */
static int ss_host_byte(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~' || c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')' ||
           c == '*' || c == '+' || c == ',' || c == ';' || c == '=';
}

/* Whether `text` is a Host value: uri-host [ ":" port ] (RFC 9112 3.2, RFC 3986 3.2.2), where
   uri-host is a bracketed IP literal or a reg-name (IPv4 addresses are reg-names by bytes), and
   may be empty. Trailing blanks are allowed (libmicrohttpd trims only leading ones). */
static int ss_valid_host(const char *text, size_t length) {
    while (length > 0 && (text[length - 1] == ' ' || text[length - 1] == '\t')) length--;
    size_t i = 0;
    if (length > 0 && text[0] == '[') {
        i = 1;
        while (i < length && text[i] != ']') {
            unsigned char c = (unsigned char)text[i];
            if (!(ss_host_byte(c) || c == ':')) return 0;
            i++;
        }
        if (i >= length || i == 1) return 0;
        i++;
    } else {
        while (i < length && text[i] != ':') {
            unsigned char c = (unsigned char)text[i];
            if (c == '%') {
                if (i + 2 >= length || ss_hex(text[i + 1]) < 0 || ss_hex(text[i + 2]) < 0) return 0;
                i += 3;
                continue;
            }
            if (!ss_host_byte(c)) return 0;
            i++;
        }
    }
    if (i == length) return 1;
    if (text[i] != ':') return 0;
    for (i++; i < length; i++) {
        if (text[i] < '0' || text[i] > '9') return 0;
    }
    return 1;
}

void ss_read_head(struct MHD_Connection *connection, const char *method, const char *target, const char *version,
                  ss_field *fields, size_t capacity, ss_head *head) {
    memset(head, 0, sizeof *head);
    struct ss_head_pass pass;
    memset(&pass, 0, sizeof pass);
    pass.fields = fields;
    pass.capacity = capacity;
    pass.name_problem = SS_HEAD_OK;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    int layout = method != NULL && version != NULL && info != NULL && info->header_size != 0;
    if (layout) {
        pass.start = method;
        pass.end = method + info->header_size;
        layout = version >= pass.start && version < pass.end;
    }
    if (layout) {
        pass.last = version + strnlen(version, (size_t)(pass.end - version));
        pass.previous_end = pass.last;
        /* The request line: the method, then only separators up to the target. */
        const char *method_end = method + strnlen(method, (size_t)(pass.end - method));
        if (target == NULL || target < method_end || target >= pass.end) {
            pass.hidden_bytes = target != NULL;
        } else {
            /* One NUL: the space libmicrohttpd replaced. */
            int nuls = 0;
            for (const char *q = method_end; q < target; q++) {
                if (*q == '\0') nuls++;
                if ((*q != '\0' && *q != ' ' && *q != '\t') || nuls > 1) {
                    pass.hidden_bytes = 1;
                    break;
                }
            }
        }
    }
    MHD_get_connection_values(connection, MHD_HEADER_KIND, ss_head_field, &pass);
    head->field_count = pass.count;

    /* The header block ends with an empty line: after the last field value (or the version)
       only blanks and at most two line ends (CR, LF, or the NULs that replaced them). */
    int clean = 0;
    if (layout) {
        const char *p = pass.last;
        while (p < pass.end && (*p == ' ' || *p == '\t')) p++;
        int line_end_bytes = 0;
        clean = 1;
        for (; p < pass.end; p++) {
            if (*p != '\0' && *p != '\r' && *p != '\n') {
                clean = 0;
                break;
            }
            line_end_bytes++;
        }
        if (line_end_bytes < 2 || line_end_bytes > 4) clean = 0;
    }

    if (clean && pass.hidden_bytes) clean = 0;
    if (clean && pass.name_problem == SS_HEAD_OK) {
        if (pass.control_in_value) pass.name_problem = SS_HEAD_CONTROL_IN_VALUE;
    }

    if (pass.length != NULL) {
        head->has_content_length = 1;
        uint64_t length = 0;
        int digits = pass.length_size > 0;
        for (size_t i = 0; i < pass.length_size; i++) {
            unsigned char c = (unsigned char)pass.length[i];
            if (c < '0' || c > '9') {
                digits = 0;
                break;
            }
            uint64_t digit = (uint64_t)(c - '0');
            length = length > (UINT64_MAX - digit) / 10 ? UINT64_MAX : length * 10 + digit;
        }
        head->content_length = length;
        if (!clean) head->problem = pass.hidden_bytes ? SS_HEAD_HIDDEN_BYTES : SS_HEAD_MALFORMED_BLOCK;
        else if (pass.name_problem != SS_HEAD_OK) head->problem = pass.name_problem;
        else if (pass.conflicting_lengths) head->problem = SS_HEAD_CONFLICTING_LENGTH;
        else if (!digits) head->problem = SS_HEAD_BAD_LENGTH;
        else if (pass.codings > 0) head->problem = SS_HEAD_LENGTH_WITH_CODING;
        if (head->problem != SS_HEAD_OK) return;
    } else if (!clean) {
        head->problem = pass.hidden_bytes ? SS_HEAD_HIDDEN_BYTES : SS_HEAD_MALFORMED_BLOCK;
        return;
    } else if (pass.name_problem != SS_HEAD_OK) {
        head->problem = pass.name_problem;
        return;
    }
    if (pass.codings > 0 && (pass.codings != 1 || !ss_equal_caseless(pass.coding, pass.coding_size, "chunked"))) {
        head->problem = SS_HEAD_UNSUPPORTED_CODING;
    } else if (pass.hosts == 0 && version != NULL && strcmp(version, "HTTP/1.1") == 0) {
        head->problem = SS_HEAD_MISSING_HOST;
    } else if (pass.hosts > 1) {
        head->problem = SS_HEAD_REPEATED_HOST;
    } else if (pass.codings > 0 && version != NULL && strcmp(version, "HTTP/1.0") == 0) {
        head->problem = SS_HEAD_CODING_IN_HTTP10;
    } else if (pass.hosts == 1 && !ss_valid_host(pass.host, pass.host_size)) {
        head->problem = SS_HEAD_BAD_HOST;
    } else if (pass.authorizations > 1) {
        head->problem = SS_HEAD_REPEATED_AUTHORIZATION;
    } else if (method == NULL || method[0] == '\0') {
        head->problem = SS_HEAD_BAD_METHOD;
    } else {
        for (const char *m = method; *m != '\0'; m++) {
            if (!ss_token_bytes[(unsigned char)*m]) {
                head->problem = SS_HEAD_BAD_METHOD;
                break;
            }
        }
    }
}

struct ss_collect_pass {
    ss_field *fields;
    size_t capacity;
    size_t count;
};

static enum MHD_Result ss_collect_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    struct ss_collect_pass *pass = cls;
    if (key == NULL) return MHD_YES;
    if (pass->count < pass->capacity) {
        ss_field *field = &pass->fields[pass->count];
        field->name = key;
        field->name_length = strlen(key);
        field->value = value;
        field->value_length = value == NULL ? 0 : strlen(value);
    }
    pass->count++;
    return MHD_YES;
}

size_t ss_collect_values(struct MHD_Connection *connection, enum MHD_ValueKind kind, ss_field *fields, size_t capacity) {
    struct ss_collect_pass pass = {fields, capacity, 0};
    MHD_get_connection_values(connection, kind, ss_collect_field, &pass);
    return pass.count;
}

uint16_t ss_daemon_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

int ss_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

void *ss_connection_socket_context(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == NULL ? NULL : info->socket_context;
}

int ss_address_bytes(const struct sockaddr *address, size_t length, uint8_t bytes[16]) {
    if (address == NULL) return 0;
    if (address->sa_family == AF_INET && length >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)address;
        memset(bytes, 0, 10);
        bytes[10] = 0xff;
        bytes[11] = 0xff;
        memcpy(bytes + 12, &in4->sin_addr, 4);
        return 1;
    }
    if (address->sa_family == AF_INET6 && length >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)address;
        memcpy(bytes, &in6->sin6_addr, 16);
        return 1;
    }
    return 0;
}

int ss_connection_address(struct MHD_Connection *connection, uint8_t bytes[16]) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || info->client_addr == NULL) return 0;
    /* libmicrohttpd keeps the address accept() gave, of its family's size. */
    size_t length = info->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    return ss_address_bytes(info->client_addr, length, bytes);
}

int ss_parse_address(const char *text, uint8_t bytes[16]) {
    struct in_addr in4;
    if (inet_pton(AF_INET, text, &in4) == 1) {
        memset(bytes, 0, 10);
        bytes[10] = 0xff;
        bytes[11] = 0xff;
        memcpy(bytes + 12, &in4, 4);
        return 1;
    }
    struct in6_addr in6;
    if (inet_pton(AF_INET6, text, &in6) == 1) {
        memcpy(bytes, &in6, 16);
        return 1;
    }
    return 0;
}

int ss_format_address(const uint8_t bytes[16], char *text, size_t size) {
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(bytes, mapped, 12) == 0) return inet_ntop(AF_INET, bytes + 12, text, (socklen_t)size) != NULL;
    return inet_ntop(AF_INET6, bytes, text, (socklen_t)size) != NULL;
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

int ss_epoll_watch_stream(int epoll_fd, int fd, uint64_t id, int want_write, int modify) {
    struct epoll_event event;
    memset(&event, 0, sizeof event);
    event.events = EPOLLIN | EPOLLRDHUP | (want_write ? EPOLLOUT : 0);
    event.data.u64 = id;
    return epoll_ctl(epoll_fd, modify ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &event);
}

int ss_epoll_wait_events(int epoll_fd, uint64_t *ids, uint32_t *events, int max, int timeout_ms) {
    struct epoll_event ready[256];
    if (max > 256) max = 256;
    int count = epoll_wait(epoll_fd, ready, max, timeout_ms);
    for (int i = 0; i < count; i++) {
        ids[i] = ready[i].data.u64;
        uint32_t bits = 0;
        if (ready[i].events & EPOLLIN) bits |= ss_stream_readable;
        if (ready[i].events & EPOLLOUT) bits |= ss_stream_writable;
        if (ready[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) bits |= ss_stream_hangup;
        events[i] = bits;
    }
    return count;
}

int ss_stream_socket(int fd, int send_buffer) {
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return -1;
    int off = 0, on = 1;
    (void)setsockopt(copy, IPPROTO_TCP, TCP_CORK, &off, sizeof off);
    (void)setsockopt(copy, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    (void)ss_socket_send_buffer(copy, send_buffer);
    return copy;
}

int ss_socket_send_buffer(int fd, int bytes) {
    if (bytes <= 0) return 0;
    return setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
}

int ss_socket_user_timeout(int fd, unsigned int milliseconds) {
    return setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &milliseconds, sizeof milliseconds);
}

int ss_socket_reset_on_close(int fd) {
    struct linger abort_on_close = {1, 0};
    return setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
}

int ss_stream_close(int fd, int reset) {
    if (reset) (void)ss_socket_reset_on_close(fd);
    return close(fd);
}

void ss_cut_connection(int fd, const void *reply, size_t length) {
    if (reply != NULL && length > 0) (void)!send(fd, reply, length, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)shutdown(fd, SHUT_RDWR);
}

ssize_t ss_stream_send(int fd, const void *bytes, size_t count) {
    return send(fd, bytes, count, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static size_t ss_chunk_header(size_t count, char header[24]) {
    int written = snprintf(header, 24, "%zx\r\n", count);
    return written < 0 ? 0 : (size_t)written;
}

size_t ss_chunk_wire_length(size_t count, int chunked) {
    if (!chunked) return count;
    char header[24];
    return ss_chunk_header(count, header) + count + 2;
}

ssize_t ss_stream_send_chunk(int fd, const void *bytes, size_t count, size_t offset, int chunked) {
    char header[24];
    size_t header_length = chunked ? ss_chunk_header(count, header) : 0;
    struct iovec parts[3];
    const void *bases[3] = {header, bytes, "\r\n"};
    size_t lengths[3] = {header_length, count, chunked ? 2 : 0};
    int used = 0;
    for (int i = 0; i < 3; i++) {
        if (offset >= lengths[i]) {
            offset -= lengths[i];
            continue;
        }
        parts[used].iov_base = (char *)bases[i] + offset;
        parts[used].iov_len = lengths[i] - offset;
        offset = 0;
        used++;
    }
    if (used == 0) return 0;
    struct msghdr message;
    memset(&message, 0, sizeof message);
    message.msg_iov = parts;
    message.msg_iovlen = (size_t)used;
    return sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
}

int ss_stream_drain(int fd) {
    char buffer[1024];
    for (;;) {
        ssize_t got = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
        if (got > 0) continue;
        if (got == 0) return 0;
        if (errno == EINTR) continue;
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 1 : 0;
    }
}

int ss_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

void ss_eventfd_signal(int fd) {
    uint64_t one = 1;
    (void)!write(fd, &one, sizeof one);
}

void ss_eventfd_drain(int fd) {
    uint64_t value;
    (void)!read(fd, &value, sizeof value);
}

size_t ss_http_date(char *text, size_t size) {
    time_t now = time(NULL);
    struct tm parts;
    if (gmtime_r(&now, &parts) == NULL) return 0;
    /* Not strftime: its %a and %b follow the locale. */
    static const char *days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    int written = snprintf(text, size, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[parts.tm_wday % 7], parts.tm_mday,
                           months[parts.tm_mon % 12], parts.tm_year + 1900, parts.tm_hour, parts.tm_min, parts.tm_sec);
    return (written < 0 || (size_t)written >= size) ? 0 : (size_t)written;
}

const char *ss_reason_phrase(unsigned int status) {
    const char *phrase = MHD_get_reason_phrase_for(status);
    return (phrase == NULL || phrase[0] == '\0') ? "Unknown" : phrase;
}
