/* TCP_INFO's byte counts, in a file of their own: <linux/tcp.h> has the full struct tcp_info
   (glibc's <netinet/tcp.h> stops before tcpi_bytes_received) and cannot be included with
   <netinet/tcp.h>, which mhd_shim.c needs. */
#include "mhd_shim.h"

#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/tcp.h>

int64_t ss_socket_bytes_received(int fd) {
    struct tcp_info info;
    memset(&info, 0, sizeof info);
    socklen_t length = sizeof info;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return -1;
    /* An older kernel fills less of the struct. */
    if (length < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received) return -1;
    return (int64_t)info.tcpi_bytes_received;
}
