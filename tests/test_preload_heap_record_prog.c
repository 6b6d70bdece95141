/* The program `snapprof record --heap` profiles in the heap record tests
 * (test_preload_heap_record.c): it knows nothing of snapprof. Three
 * functions allocate known bytes through malloc: heap_big 3 KiB blocks and
 * heap_small 1 KiB blocks, as many of each, kept until exit (big holds 3/4
 * of what is in use at exit); heap_churn as many bytes as heap_small, each
 * block freed at once (in alloc_space, never in inuse_space). Prints the
 * truth and whether libsnapprof-heap.so is loaded. argv[1]: blocks of
 * each (default and most 6000). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS_MAX 6000 /* of each: 30 MiB in all, ~7500 samples at 4 KiB */

static int BLOCKS = BLOCKS_MAX; /* argv[1] may ask for fewer */
static void *g_keep[2 * BLOCKS_MAX];
static unsigned g_n_keep;

__attribute__((noinline)) static void heap_big(void)
{
    for (int i = 0; i < BLOCKS; i++) {
        char *p = malloc(3072);
        if (!p)
            exit(1);
        memset(p, 1, 64);
        g_keep[g_n_keep++] = p;
    }
}

__attribute__((noinline)) static void heap_small(void)
{
    for (int i = 0; i < BLOCKS; i++) {
        char *p = malloc(1024);
        if (!p)
            exit(1);
        memset(p, 2, 64);
        g_keep[g_n_keep++] = p;
    }
}

__attribute__((noinline)) static void heap_churn(void)
{
    for (int i = 0; i < BLOCKS; i++) {
        char *volatile p = malloc(1024);
        if (!p)
            exit(1);
        memset(p, 3, 64);
        free(p);
    }
}

/* 1 when the heap hooks library is mapped into this process. */
static int heap_lib_loaded(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        found |= strstr(line, "libsnapprof-heap") != NULL;
    if (f)
        fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    if (argc > 1 && atoi(argv[1]) > 0 && atoi(argv[1]) < BLOCKS_MAX)
        BLOCKS = atoi(argv[1]);
    heap_big();
    heap_small();
    heap_churn();
    printf("heap_lib=%d\n", heap_lib_loaded());
    printf("truth: heap_big %d heap_small %d heap_churn %d bytes\n", BLOCKS * 3072, BLOCKS * 1024,
           BLOCKS * 1024);
    return 0;
}
