/* Included by the C test peers: never outlive the test JVM that started them (it may crash, skipping its
 * cleanup); a peer whose parent is gone is reparented, which a timer checks four times a second. */
#ifndef UCX4J_PARENT_WATCH_H
#define UCX4J_PARENT_WATCH_H
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/time.h>

static pid_t parent;
static void watch_parent(int sig) { (void)sig; if (getppid() != parent) _exit(3); }
static void start_parent_watch(void) {
    parent = getppid();
    struct sigaction sa; memset(&sa, 0, sizeof(sa));
    sa.sa_handler = watch_parent; sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every = {{0, 250000}, {0, 250000}};
    setitimer(ITIMER_REAL, &every, NULL);
}
#endif
