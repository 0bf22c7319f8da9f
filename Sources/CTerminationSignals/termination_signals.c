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
