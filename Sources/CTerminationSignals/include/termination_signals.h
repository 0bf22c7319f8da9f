#ifndef STATESERVER_TERMINATION_SIGNALS_H
#define STATESERVER_TERMINATION_SIGNALS_H

/// Installs handlers for SIGTERM and SIGINT (replacing any inherited SIG_IGN) that write the
/// signal number to a pipe. Returns 0, or -1 if the pipe cannot be made.
int ss_install_termination_handlers(void);

/// Blocks until SIGTERM or SIGINT arrived (now or since the handlers were installed) and
/// returns its number. A signal is never lost: it waits in the pipe.
int ss_wait_for_termination(void);

#endif
