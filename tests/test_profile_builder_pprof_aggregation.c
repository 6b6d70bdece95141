/* profile_builder_pprof_aggregation: equal samples merge with summed values, others stay apart. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <stdlib.h>
#include <string.h>

static const snapprof_module_t lib_a = {
    .start = 0x20000000u,
    .limit = 0x20100000u,
    .path = "/nonexistent/snapprof/liba.so",
    .build_id = "aa",
    .kind = SNAPPROF_MODULE_NATIVE,
    .is_loaded = 1,
};

static snapprof_builder_t *builder;
static uint64_t total_cpu, total_wall, total_count;

static void add(const snapprof_frame_t *frames, size_t n, pid_t tid, const char *thread,
                const snapprof_label_t *labels, size_t n_labels, uint64_t cpu, uint64_t wall)
{
    pbt_feed(builder, frames, n, tid, thread, labels, n_labels, cpu, wall, 1);
    total_cpu += cpu;
    total_wall += wall;
    total_count++;
}

/* The sample whose stack is these location names (leaf first) and whose
 * labels include key=str (key NULL: any labels); fails unless exactly one. */
static const Snapprof__Pprof__Sample *find(const Snapprof__Pprof__Profile *p,
                                           const char *const *names, size_t n, int64_t tid,
                                           const char *key, const char *str)
{
    const Snapprof__Pprof__Sample *found = NULL;
    for (size_t i = 0; i < p->n_sample; i++) {
        const Snapprof__Pprof__Sample *s = p->sample[i];
        if (s->n_location_id != n || pbt_label(p, s, "thread_id")->num != tid)
            continue;
        int same = 1;
        for (size_t j = 0; j < n && same; j++)
            same = strcmp(pbt_location_name(p, s->location_id[j]), names[j]) == 0;
        if (!same)
            continue;
        if (key != NULL) {
            const Snapprof__Pprof__Label *l = pbt_label(p, s, key);
            if (l == NULL || l->str == 0 || strcmp(pbt_str(p, l->str), str) != 0)
                continue;
        } else if (s->n_label != 2) {
            continue;
        }
        if (found != NULL)
            TEST_FAIL("two samples for the same stack and labels");
        found = s;
    }
    ASSERT_NOT_NULL(found);
    return found;
}

static void test_aggregation(void)
{
    char *path = pbt_tmp_path("pb-aggregation", "agg.pb.gz");
    builder = pbt_create(path);

    snapprof_frame_t ab[] = {{0, &pbt_jit_module, SNAPPROF_FRAME_JIT, "a"},
                             {0, &pbt_jit_module, SNAPPROF_FRAME_JIT, "b"}};
    snapprof_frame_t ba[] = {ab[1], ab[0]};
    /* JIT frames are one location per name: other pcs in a and b change
     * nothing. */
    snapprof_frame_t ab_moved[] = {
        {pbt_jit_module.start + 0x10, &pbt_jit_module, SNAPPROF_FRAME_JIT, "a"},
        {pbt_jit_module.start + 0x20, &pbt_jit_module, SNAPPROF_FRAME_JIT, "b"}};

    for (int i = 0; i < 5; i++)
        add(ab, 2, 1, "t1", NULL, 0, 100 + (uint64_t)i, 1000);
    for (int i = 0; i < 3; i++)
        add(ab_moved, 2, 1, "t1", NULL, 0, 7, 1000);
    /* The same stack leaf-outward reversed is another stack. */
    add(ba, 2, 1, "t1", NULL, 0, 1, 1);
    /* Another thread is another sample. */
    add(ab, 2, 2, "t2", NULL, 0, 1, 1);
    add(ab, 2, 2, "t2", NULL, 0, 1, 1);

    /* Labels take part in the key: values, kinds and units. */
    snapprof_label_t x = {.key = "req", .str = "x"};
    snapprof_label_t y = {.key = "req", .str = "y"};
    snapprof_label_t n1 = {.key = "n", .num = 1};
    snapprof_label_t n2 = {.key = "n", .num = 2};
    snapprof_label_t n1_bytes = {.key = "n", .num = 1, .num_unit = "bytes"};
    add(ab, 2, 1, "t1", &x, 1, 10, 10);
    add(ab, 2, 1, "t1", &x, 1, 10, 10);
    add(ab, 2, 1, "t1", &y, 1, 10, 10);
    add(ab, 2, 1, "t1", &n1, 1, 1, 1);
    add(ab, 2, 1, "t1", &n1, 1, 1, 1);
    add(ab, 2, 1, "t1", &n2, 1, 1, 1);
    add(ab, 2, 1, "t1", &n1_bytes, 1, 1, 1);

    /* Native frames are one location per (pc, module). */
    snapprof_frame_t native1[] = {{0x20000010u, &lib_a, SNAPPROF_FRAME_NATIVE, NULL}};
    snapprof_frame_t native2[] = {{0x20000020u, &lib_a, SNAPPROF_FRAME_NATIVE, NULL}};
    add(native1, 1, 1, "t1", NULL, 0, 1, 1);
    add(native1, 1, 1, "t1", NULL, 0, 1, 1);
    add(native2, 1, 1, "t1", NULL, 0, 1, 1);

    ASSERT_OK(pbt_complete(builder, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(builder);

    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);

    /* ab (t1, no labels), ba, ab (t2), x, y, n1, n2, n1 bytes, native1,
     * native2. */
    ASSERT_EQ(p->n_sample, 10);
    /* a, b, and the two native pcs. */
    ASSERT_EQ(p->n_location, 4);

    const char *const ab_names[] = {"a", "b"};
    const char *const ba_names[] = {"b", "a"};
    const Snapprof__Pprof__Sample *s = find(p, ab_names, 2, 1, NULL, NULL);
    ASSERT_EQ(s->value[0], 8);
    ASSERT_EQ(s->value[1], 100 + 101 + 102 + 103 + 104 + 3 * 7);
    ASSERT_EQ(s->n_value, 2); /* a CPU profile: no wall value */
    s = find(p, ba_names, 2, 1, NULL, NULL);
    ASSERT_EQ(s->value[0], 1);
    s = find(p, ab_names, 2, 2, NULL, NULL);
    ASSERT_EQ(s->value[0], 2);
    ASSERT_STR_EQ(pbt_str(p, pbt_label(p, s, "thread_name")->str), "t2");
    s = find(p, ab_names, 2, 1, "req", "x");
    ASSERT_EQ(s->value[0], 2);
    ASSERT_EQ(s->value[1], 20);
    s = find(p, ab_names, 2, 1, "req", "y");
    ASSERT_EQ(s->value[0], 1);

    int n1_plain = 0, n1_unit = 0, n2_count = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
        const Snapprof__Pprof__Label *l = pbt_label(p, p->sample[i], "n");
        if (l == NULL)
            continue;
        if (l->num == 2)
            n2_count += (int)p->sample[i]->value[0];
        else if (l->num_unit != 0)
            n1_unit += (int)p->sample[i]->value[0];
        else
            n1_plain += (int)p->sample[i]->value[0];
    }
    ASSERT_EQ(n1_plain, 2);
    ASSERT_EQ(n1_unit, 1);
    ASSERT_EQ(n2_count, 1);

    /* Nothing is lost or counted twice. */
    int64_t sums[2] = {0, 0};
    for (size_t i = 0; i < p->n_sample; i++)
        for (int v = 0; v < 2; v++)
            sums[v] += p->sample[i]->value[v];
    ASSERT_UEQ(sums[0], total_count);
    ASSERT_UEQ(sums[1], total_cpu);
    /* total_wall: a CPU profile has no wall value (it keeps the sums for
     * a wall profile, which writes them). */

    snapprof__pprof__profile__free_unpacked(p, NULL);
    pbt_remove(path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"aggregation", test_aggregation},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
