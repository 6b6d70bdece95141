/* The CFI table unwinder's internal entry points, for tests and the
 * benchmark. Internal. */
#ifndef SNAPPROF_CFI_TABLE_UNWINDER_H
#define SNAPPROF_CFI_TABLE_UNWINDER_H

#include "unwinder/cfi_table.h"
#include "unwinder/unwinder_internal.h"

/* snapprof_cfi_table_unwinder_create(), choosing when tables are compiled:
 * eager = 1 compiles a module's whole table the first time one of its pcs
 * is met; 0 (the public default) compiles each FDE on its first use. */
int snapprof__cfi_table_unwinder_create(int eager, snapprof_unwinder_t **out);

/* The modules whose tables the unwinder can use (the process's, compiled
 * per FDE or whole as the unwinder does), and the tables: fills up to max
 * of each and returns how many there are. No walk, update or destroy of a
 * CFI table unwinder may run meanwhile (the tables may go). */
size_t snapprof__cfi_table_unwinder_tables(snapprof_unwinder_t *unwinder,
                                           const snapprof_module_t **modules,
                                           snapprof__cfi_table_t **tables, size_t max);

#endif
