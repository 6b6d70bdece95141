/* Sample labels: per-thread and process-wide key/value slots that the
 * signal handler copies into every sample (Chromium's SampleMetadata, Go's
 * pprof labels).
 *
 * Storage. Each scope is a table of SNAPPROF_LABEL_SLOTS slots; a slot
 * holds two versions of a 16-word label and a sequence number. A writer
 * (the owning thread for its own table; any thread, one at a time under
 * g_process_lock, for the process table) announces a write by making seq
 * odd, writes the version that is not current, and makes seq even again,
 * which makes that version current. The current version is (seq >> 1) & 1
 * whether seq is odd or even, so a reader never has to wait for a writer.
 *
 * Why two versions: a thread's labels are read by the signal handler on
 * the same thread, which may have interrupted that thread in the middle of
 * a write. An ordinary seqlock reader would retry forever there (the
 * writer cannot run until the handler returns); here it reads the other,
 * complete version. For the process table the writer is another thread and
 * may overwrite the version being read; the reader sees that in seq (it
 * moved by more than one write) and retries a few times, then leaves the
 * label out and counts it.
 *
 * All label words are C11 atomics accessed with relaxed loads and stores,
 * ordered by the release/acquire fences around them (Boehm's seqlock
 * recipe), so there is no data race for TSan to find and no lock anywhere
 * the handler or the sampler could wait on. */
#include "common/fork_resets.h"
#include "common/label_keys.h"
#include "labels/labels.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Word layout of a label. */
enum {
    W_KIND = 0, /* KIND_* */
    W_NUM = 1,
    W_UNIT = 2, /* SNAPPROF_LABEL_UNIT_MAX bytes */
    W_KEY = 4,  /* SNAPPROF_LABEL_KEY_MAX bytes */
    W_STR = 8   /* SNAPPROF_LABEL_STR_MAX bytes */
};
enum { KIND_EMPTY = 0, KIND_STR = 1, KIND_NUM = 2 };

_Static_assert(W_UNIT * 8 + SNAPPROF_LABEL_UNIT_MAX == W_KEY * 8, "unit words");
_Static_assert(W_KEY * 8 + SNAPPROF_LABEL_KEY_MAX == W_STR * 8, "key words");
_Static_assert(W_STR * 8 + SNAPPROF_LABEL_STR_MAX == SNAPPROF__LABEL_WORDS * 8, "string words");
_Static_assert(SNAPPROF_LABEL_SLOTS <= 32, "the used mask is 32 bits");

typedef struct slot {
    _Atomic uint32_t seq;
    _Atomic uint64_t v[2][SNAPPROF__LABEL_WORDS];
} slot_t;

typedef struct table {
    _Atomic uint32_t used; /* bit i: slot i may hold a label; lets readers skip the rest */
    slot_t slots[SNAPPROF_LABEL_SLOTS];
} table_t;

/* The calling thread's table, allocated by its first set. Initial-exec TLS
 * holds only this pointer (static TLS is scarce when the library is
 * dlopen()ed) and is safe to read in a signal handler. */
static __thread _Atomic(table_t *) tls_table __attribute__((tls_model("initial-exec")));

static table_t g_process;
static pthread_mutex_t g_process_lock = PTHREAD_MUTEX_INITIALIZER;

/* The child of a fork() taken while another thread set a process label
 * would find g_process_lock held for good (fork_resets.h). It takes the
 * lock anew, and a write cut short by the fork is undone: that write made
 * seq odd and was filling the version that is not current, so seq - 1
 * names the whole one again. A label the write would have added may be
 * left out of the used mask: the set did not happen, in the child. */
static pthread_once_t g_process_fork_once = PTHREAD_ONCE_INIT;

static void process_fork_child(void)
{
    if (pthread_mutex_trylock(&g_process_lock) == 0) {
        pthread_mutex_unlock(&g_process_lock); /* free at the fork: the table is whole */
        return;
    }
    pthread_mutex_init(&g_process_lock, NULL);
    for (int i = 0; i < SNAPPROF_LABEL_SLOTS; i++) {
        uint32_t q = atomic_load_explicit(&g_process.slots[i].seq, memory_order_relaxed);
        if (q & 1)
            atomic_store_explicit(&g_process.slots[i].seq, q - 1, memory_order_relaxed);
    }
    snapprof__fork_reset_note(SNAPPROF__FORK_LABELS_PROCESS);
}

static void process_fork_once(void)
{
    pthread_atfork(NULL, NULL, process_fork_child);
}

static pthread_key_t g_table_key;
static pthread_once_t g_table_key_once = PTHREAD_ONCE_INIT;
static int g_table_key_ok;

/* ------------------------------------------------------------------------ */
/* Slots                                                                    */
/* ------------------------------------------------------------------------ */

/* Makes words the slot's current label. One writer per slot at a time. */
static void slot_write(slot_t *s, const uint64_t *words)
{
    uint32_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed);
    /* Orders the announcement before the data: a reader that sees any of
     * the new words also sees seq moved. */
    atomic_thread_fence(memory_order_release);
    unsigned v = ((q >> 1) + 1) & 1;
    for (int k = 0; k < SNAPPROF__LABEL_WORDS; k++)
        atomic_store_explicit(&s->v[v][k], words[k], memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 2, memory_order_release);
}

/* The writer's own view of a word of the slot's current label. */
static uint64_t slot_word(slot_t *s, int k)
{
    uint32_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    return atomic_load_explicit(&s->v[(q >> 1) & 1][k], memory_order_relaxed);
}

/* Copies the slot's current label into out. Returns 0, or -1 when writers
 * kept overwriting the version being read. Async-signal-safe. */
static int slot_read(slot_t *s, uint64_t *out)
{
    for (int tries = 0; tries < 4; tries++) {
        uint32_t q0 = atomic_load_explicit(&s->seq, memory_order_acquire);
        unsigned v = (q0 >> 1) & 1;
        for (int k = 0; k < SNAPPROF__LABEL_WORDS; k++)
            out[k] = atomic_load_explicit(&s->v[v][k], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        uint32_t q1 = atomic_load_explicit(&s->seq, memory_order_relaxed);
        /* Version v is written next by the write that makes seq
         * (q0 & ~1) + 3; until then the copy is whole. */
        if (q1 - (q0 & ~1u) <= 2)
            return 0;
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                   */
/* ------------------------------------------------------------------------ */

static void free_table(void *p)
{
    /* A signal that arrives from here on finds no table. */
    atomic_store_explicit(&tls_table, NULL, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    free(p);
}

static void make_table_key(void)
{
    g_table_key_ok = pthread_key_create(&g_table_key, free_table) == 0;
}

/* The calling thread's table; with create, made on first use. NULL when
 * there is none (or no memory: *err is set then). */
static table_t *thread_table(int create, int *err)
{
    table_t *t = atomic_load_explicit(&tls_table, memory_order_relaxed);
    if (t != NULL || !create)
        return t;
    pthread_once(&g_table_key_once, make_table_key);
    if (!g_table_key_ok) {
        *err = -EAGAIN;
        return NULL;
    }
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    if (pthread_setspecific(g_table_key, t) != 0) {
        free(t);
        *err = -ENOMEM;
        return NULL;
    }
    atomic_store_explicit(&tls_table, t, memory_order_relaxed);
    return t;
}

/* Copies s (with its NUL) into words at w; -ENAMETOOLONG when it does not
 * fit in max bytes. */
static int pack(uint64_t *words, int w, size_t max, const char *s)
{
    size_t len = strlen(s);
    if (len + 1 > max)
        return -ENAMETOOLONG;
    memcpy((char *)&words[w], s, len);
    return 0;
}

/* The slot holding key (packed in words), or -1. */
static int find_slot(table_t *t, const uint64_t *words)
{
    uint32_t used = atomic_load_explicit(&t->used, memory_order_relaxed);
    for (int i = 0; i < SNAPPROF_LABEL_SLOTS; i++) {
        if (!(used & (1u << i)))
            continue;
        slot_t *s = &t->slots[i];
        int same = 1;
        for (int k = W_KEY; k < W_STR && same; k++)
            same = slot_word(s, k) == words[k];
        if (same)
            return i;
    }
    return -1;
}

/* Sets (words[W_KIND] != KIND_EMPTY) or removes the label in t. The caller
 * is t's only writer. */
static int table_apply(table_t *t, const uint64_t *words)
{
    int i = find_slot(t, words);
    if (words[W_KIND] == KIND_EMPTY) {
        if (i < 0)
            return -ENOENT;
        slot_write(&t->slots[i], words);
        uint32_t used = atomic_load_explicit(&t->used, memory_order_relaxed);
        atomic_store_explicit(&t->used, used & ~(1u << i), memory_order_release);
        return 0;
    }
    if (i < 0) {
        uint32_t used = atomic_load_explicit(&t->used, memory_order_relaxed);
        for (i = 0; i < SNAPPROF_LABEL_SLOTS && (used & (1u << i)); i++)
            ;
        if (i == SNAPPROF_LABEL_SLOTS)
            return -ENOSPC;
        slot_write(&t->slots[i], words);
        /* Published after the slot holds the label. */
        atomic_store_explicit(&t->used, used | (1u << i), memory_order_release);
        return 0;
    }
    slot_write(&t->slots[i], words);
    return 0;
}

static int apply(snapprof_label_scope_t scope, const uint64_t *words)
{
    if (scope == SNAPPROF_LABEL_PROCESS) {
        pthread_once(&g_process_fork_once, process_fork_once);
        pthread_mutex_lock(&g_process_lock);
        int err = table_apply(&g_process, words);
        pthread_mutex_unlock(&g_process_lock);
        return err;
    }
    int err = 0;
    table_t *t = thread_table(words[W_KIND] != KIND_EMPTY, &err);
    if (t == NULL)
        return err ? err : -ENOENT;
    return table_apply(t, words);
}

/* Checks scope and key and packs the key. */
static int begin(snapprof_label_scope_t scope, const char *key, uint64_t *words)
{
    if (scope != SNAPPROF_LABEL_THREAD && scope != SNAPPROF_LABEL_PROCESS)
        return -EINVAL;
    if (key == NULL || key[0] == '\0' || snapprof__label_key_reserved(key))
        return -EINVAL;
    memset(words, 0, SNAPPROF__LABEL_WORDS * sizeof *words);
    return pack(words, W_KEY, SNAPPROF_LABEL_KEY_MAX, key);
}

/* ------------------------------------------------------------------------ */
/* Public API                                                               */
/* ------------------------------------------------------------------------ */

int snapprof_label_set_str(snapprof_label_scope_t scope, const char *key, const char *value)
{
    uint64_t words[SNAPPROF__LABEL_WORDS];
    int err = begin(scope, key, words);
    if (err != 0)
        return err;
    if (value == NULL)
        return -EINVAL;
    if ((err = pack(words, W_STR, SNAPPROF_LABEL_STR_MAX, value)) != 0)
        return err;
    words[W_KIND] = KIND_STR;
    return apply(scope, words);
}

int snapprof_label_set_num(snapprof_label_scope_t scope, const char *key, int64_t value,
                           const char *unit)
{
    uint64_t words[SNAPPROF__LABEL_WORDS];
    int err = begin(scope, key, words);
    if (err != 0)
        return err;
    if (unit != NULL && (err = pack(words, W_UNIT, SNAPPROF_LABEL_UNIT_MAX, unit)) != 0)
        return err;
    words[W_KIND] = KIND_NUM;
    words[W_NUM] = (uint64_t)value;
    return apply(scope, words);
}

int snapprof_label_remove(snapprof_label_scope_t scope, const char *key)
{
    uint64_t words[SNAPPROF__LABEL_WORDS];
    int err = begin(scope, key, words);
    if (err != 0)
        return err;
    words[W_KIND] = KIND_EMPTY;
    return apply(scope, words);
}

/* ------------------------------------------------------------------------ */
/* Capture (signal handler) and decoding (sampler)                          */
/* ------------------------------------------------------------------------ */

/* Appends table t's labels to out. Async-signal-safe. */
static void capture_table(table_t *t, int is_thread, snapprof__label_capture_t *out)
{
    uint32_t used = atomic_load_explicit(&t->used, memory_order_acquire);
    for (int i = 0; i < SNAPPROF_LABEL_SLOTS && used != 0; i++) {
        if (!(used & (1u << i)))
            continue;
        used &= ~(1u << i);
        uint64_t *dst = out->slots[out->count];
        if (slot_read(&t->slots[i], dst) != 0) {
            out->skipped++;
            continue;
        }
        if (dst[W_KIND] == KIND_EMPTY)
            continue; /* removed since used was read */
        out->is_thread[out->count] = (uint8_t)is_thread;
        out->count++;
    }
}

/* Async-signal-safe. */
void snapprof__labels_capture(snapprof__label_capture_t *out)
{
    out->count = 0;
    out->skipped = 0;
    capture_table(&g_process, 0, out);
    table_t *t = atomic_load_explicit(&tls_table, memory_order_relaxed);
    if (t != NULL)
        capture_table(t, 1, out);
    snapprof__app_frame_capture(&out->in_app_frame, &out->app_frame_id);
    snapprof__events_capture(&out->events);
}

size_t snapprof__labels_decode(snapprof__label_capture_t *c, snapprof_label_t *out)
{
    size_t n = 0;
    uint32_t count = c->count <= 2 * SNAPPROF_LABEL_SLOTS ? c->count : 2 * SNAPPROF_LABEL_SLOTS;
    /* Whole versions were copied, so the strings end within their words;
     * the terminators are set again so that no copy can be misread. */
    for (uint32_t i = 0; i < count; i++) {
        char *w = (char *)c->slots[i];
        w[W_UNIT * 8 + SNAPPROF_LABEL_UNIT_MAX - 1] = '\0';
        w[W_KEY * 8 + SNAPPROF_LABEL_KEY_MAX - 1] = '\0';
        w[W_STR * 8 + SNAPPROF_LABEL_STR_MAX - 1] = '\0';
    }
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < count; i++) {
            if (c->is_thread[i] != pass)
                continue;
            const uint64_t *w = c->slots[i];
            const char *key = (const char *)&w[W_KEY];
            if (pass == 0) {
                /* A thread label overrides the process label of its key. */
                int shadowed = 0;
                for (uint32_t j = 0; j < count && !shadowed; j++)
                    shadowed =
                        c->is_thread[j] && strcmp((const char *)&c->slots[j][W_KEY], key) == 0;
                if (shadowed)
                    continue;
            }
            snapprof_label_t *l = &out[n++];
            memset(l, 0, sizeof *l);
            l->key = key;
            if (w[W_KIND] == KIND_STR) {
                l->str = (const char *)&w[W_STR];
            } else {
                l->num = (int64_t)w[W_NUM];
                const char *unit = (const char *)&w[W_UNIT];
                l->num_unit = unit[0] ? unit : NULL;
            }
        }
    }
    if (c->in_app_frame) {
        snapprof_label_t *l = &out[n++];
        memset(l, 0, sizeof *l);
        l->key = snapprof__key_frame;
        l->num = (int64_t)c->app_frame_id;
    }
    n += snapprof__events_decode(&c->events, out + n);
    return n;
}
