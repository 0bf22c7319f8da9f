#ifndef STATESERVER_TERMINATION_SIGNALS_H
#define STATESERVER_TERMINATION_SIGNALS_H

/// Installs handlers for SIGTERM and SIGINT (replacing any inherited SIG_IGN) that write the
/// signal number to a pipe. Returns 0, or -1 if the pipe cannot be made.
int ss_install_termination_handlers(void);

/// Blocks until SIGTERM or SIGINT arrived (now or since the handlers were installed) and
/// returns its number. A signal is never lost: it waits in the pipe.
int ss_wait_for_termination(void);

/// Installs handlers for the fatal signals SIGILL, SIGTRAP (a Swift trap: overflow, force
/// unwrap, precondition), SIGABRT, SIGBUS, SIGFPE and SIGSEGV that write one line to stderr,
/// `state-server: fatal signal N (NAME), the process ends`, with write(2) only
/// (async-signal-safe), then hand the signal to the handler that was there before (the Swift
/// runtime's backtracer, when it is enabled: it prints the backtrace after the line), and end
/// the process by the same signal (default action, raised again), so its exit status stays that
/// signal. Call it once, early in main, after the runtime installed its own handlers (it does
/// before main). Returns the number of signals it took over.
int ss_install_fatal_signal_handlers(void);

#endif
