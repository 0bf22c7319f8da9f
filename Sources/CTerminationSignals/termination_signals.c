#define _GNU_SOURCE
#include "termination_signals.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static int ss_pipe[2] = {-1, -1};

/* Async-signal-safe: one write(2) of one byte. */
static void ss_on_signal(int number) {
    int saved = errno;
    unsigned char byte = (unsigned char)number;
    ssize_t ignored = write(ss_pipe[1], &byte, 1);
    (void)ignored;
    errno = saved;
}

int ss_install_termination_handlers(void) {
    if (pipe2(ss_pipe, O_CLOEXEC) != 0) return -1;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = ss_on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    return 0;
}

int ss_wait_for_termination(void) {
    unsigned char byte = 0;
    for (;;) {
        ssize_t count = read(ss_pipe[0], &byte, 1);
        if (count == 1) return byte;
        if (count < 0 && errno == EINTR) continue;
        return SIGTERM;
    }
}

/* Fatal signals: one line on stderr, then the previous handler (the Swift runtime's backtracer),
   then death by the same signal. Everything here is async-signal-safe: write(2), sigaction(2),
   raise(3), and no allocation or stdio. */

static const int ss_fatal_signals[] = {SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV};
#define SS_FATAL_COUNT (sizeof ss_fatal_signals / sizeof ss_fatal_signals[0])
static struct sigaction ss_previous[SS_FATAL_COUNT];

static const char *ss_fatal_name(int number) {
    switch (number) {
        case SIGILL: return "SIGILL";
        case SIGTRAP: return "SIGTRAP";
        case SIGABRT: return "SIGABRT";
        case SIGBUS: return "SIGBUS";
        case SIGFPE: return "SIGFPE";
        case SIGSEGV: return "SIGSEGV";
        default: return "?";
    }
}

static size_t ss_append(char *buffer, size_t used, size_t size, const char *text) {
    while (*text != '\0' && used + 1 < size) buffer[used++] = *text++;
    return used;
}

static void ss_on_fatal(int number, siginfo_t *info, void *context) {
    char line[96];
    size_t used = ss_append(line, 0, sizeof line, "state-server: fatal signal ");
    char digits[12];
    int count = 0;
    unsigned int value = (unsigned int)number;
    do {
        digits[count++] = (char)('0' + value % 10);
        value /= 10;
    } while (value != 0 && count < (int)sizeof digits);
    while (count > 0 && used + 1 < sizeof line) line[used++] = digits[--count];
    used = ss_append(line, used, sizeof line, " (");
    used = ss_append(line, used, sizeof line, ss_fatal_name(number));
    used = ss_append(line, used, sizeof line, "), the process ends\n");
    ssize_t ignored = write(STDERR_FILENO, line, used);
    (void)ignored;

    /* The handler that was there before (the Swift runtime's backtracer), with the real siginfo
       and context, so its backtrace starts where the signal came from. */
    for (size_t i = 0; i < SS_FATAL_COUNT; i++) {
        if (ss_fatal_signals[i] != number) continue;
        struct sigaction *previous = &ss_previous[i];
        if (previous->sa_flags & SA_SIGINFO) {
            if (previous->sa_sigaction != NULL) previous->sa_sigaction(number, info, context);
        } else if (previous->sa_handler != SIG_DFL && previous->sa_handler != SIG_IGN && previous->sa_handler != NULL) {
            previous->sa_handler(number);
        }
        break;
    }

    /* Death by the same signal: the default action, and the signal again. It is blocked while
       this handler runs, so it is delivered when the handler returns; a fault re-executed after
       the return meets the default action too. */
    struct sigaction fallback;
    memset(&fallback, 0, sizeof fallback);
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(number, &fallback, NULL);
    raise(number);
}

int ss_install_fatal_signal_handlers(void) {
    /* Once: a second call would save this handler as the previous one and call itself. */
    static int done = 0;
    if (done) return 0;
    done = 1;
    int installed = 0;
    for (size_t i = 0; i < SS_FATAL_COUNT; i++) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = ss_on_fatal;
        sigemptyset(&action.sa_mask);
        /* SA_ONSTACK: on the alternate stack where one is set up (the Swift runtime sets one up
           for its backtracer), so a stack overflow can still be reported. */
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        if (sigaction(ss_fatal_signals[i], &action, &ss_previous[i]) == 0) installed++;
    }
    return installed;
}
