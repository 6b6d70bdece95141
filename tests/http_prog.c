/* A program for the `snapprof record --http` tests: it knows nothing of
 * snapprof. It burns CPU in http_burn until the file STOP exists, prints
 * "burned" and exits 0. With "closefds" first it burns until STOP.close
 * exists, then closes every fd above 2 (close_range), opens /dev/null at
 * the freed numbers (so the control socket's number now names a file of
 * its own), prints "closed", then burns as above and exits 3.
 *
 *   http_prog [closefds] STOP */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) static void http_burn(const char *stop)
{
    volatile uint64_t x = 1;
    while (access(stop, F_OK) != 0)
        for (int i = 0; i < 2000000; i++)
            x = x * 6364136223846793005u + 1;
}

int main(int argc, char **argv)
{
    int closefds = argc == 3 && strcmp(argv[1], "closefds") == 0;
    if (argc != 2 + closefds) {
        fprintf(stderr, "usage: http_prog [closefds] STOP\n");
        return 2;
    }
    if (closefds) {
        char first[4096];
        snprintf(first, sizeof first, "%s.close", argv[2]);
        http_burn(first);
        if (close_range(3, ~0u, 0) != 0) {
            perror("close_range");
            return 2;
        }
        for (int i = 0; i < 16; i++)
            if (open("/dev/null", O_RDONLY) < 0)
                return 2;
        printf("closed\n");
        fflush(stdout);
    }
    http_burn(argv[argc - 1]);
    printf("burned\n");
    return closefds ? 3 : 0;
}
