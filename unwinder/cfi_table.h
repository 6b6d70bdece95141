/* Compiled CFI tables: one module's DWARF CFI (.eh_frame, or .debug_frame
 * when it has no .eh_frame_hdr) turned into compact rows sorted by address,
 * so that a walk over a stack copy does a binary search and a few reads per
 * frame instead of interpreting DWARF. Internal.
 *
 * The rows are made by elfutils' CFI reader (dwarf_cfi_addrframe,
 * dwarf_frame_cfa, dwarf_frame_register), never by a DWARF parser of our
 * own. That reader re-runs an FDE from its start and allocates a frame on
 * every call, so a table compiles each FDE the first time a pc in it is
 * looked up (or all of them at once when opened eagerly, which the
 * benchmark uses to time a whole-module build).
 *
 * NOT async-signal-safe and not thread-safe: a table is built and read on
 * one thread (the sampler thread, or a test or bench thread), never in the
 * signal handler: it opens files and allocates. */
#ifndef SNAPPROF_CFI_TABLE_H
#define SNAPPROF_CFI_TABLE_H

#include <snapprof/unwinder.h>

#include <stddef.h>
#include <stdint.h>

typedef struct snapprof__cfi_table snapprof__cfi_table_t;

/* What a row says about the frames whose pc lies in it. */
enum {
    /* CFA = cfa_reg + cfa_offset; the return address is saved at CFA +
     * ra_offset; rbp is saved at CFA + rbp_offset when RBP_SAVED is set and
     * keeps its value otherwise; the caller's sp is the CFA. */
    SNAPPROF__CFI_ROW_RULES = 1,
    /* The return address is undefined: the outermost frame. */
    SNAPPROF__CFI_ROW_OUTERMOST = 2,
    /* CFI a row cannot express (DWARF expressions, a CFA in another
     * register, a signal frame, ...): the frame goes to the unwinder that
     * interprets the CFI itself. */
    SNAPPROF__CFI_ROW_FALLBACK = 3,
};
#define SNAPPROF__CFI_ROW_KIND_MASK 0x0f
#define SNAPPROF__CFI_ROW_RBP_SAVED 0x10

typedef struct snapprof__cfi_row {
    uint32_t start; /* first address of the row, as an offset from its FDE's start */
    int32_t cfa_offset;
    int16_t ra_offset;
    int16_t rbp_offset;
    uint8_t cfa_reg; /* DWARF number: 6 (rbp) or 7 (rsp) */
    uint8_t kind;    /* SNAPPROF__CFI_ROW_* | flags */
} snapprof__cfi_row_t;

/* Where a table's CFI came from. */
typedef enum {
    SNAPPROF__CFI_SOURCE_EH_FRAME = 1,   /* .eh_frame, indexed by .eh_frame_hdr */
    SNAPPROF__CFI_SOURCE_DEBUG_FRAME = 2 /* .debug_frame (the object's or its debug file's) */
} snapprof__cfi_source_t;

/* Opens the table of a native module (an ELF file at an absolute path): its
 * .eh_frame when it has an .eh_frame_hdr index, else its .debug_frame
 * (found as the .debug_frame unwinder finds it). Reads the file's FDE index
 * now; rows are compiled per FDE on first use, or all now when eager.
 * A file whose build-id differs from the module's is not used. Returns 0,
 * -ENOENT when there is no usable CFI, or -ENOMEM. */
int snapprof__cfi_table_open(const snapprof_module_t *module, int eager,
                             snapprof__cfi_table_t **out);
void snapprof__cfi_table_destroy(snapprof__cfi_table_t *table);

snapprof__cfi_source_t snapprof__cfi_table_source(const snapprof__cfi_table_t *table);

/* The row for pc (a runtime address in the module), compiling its FDE on
 * first use; NULL when no FDE covers pc. The row stays valid until the
 * next lookup (compiling may move the rows). */
const snapprof__cfi_row_t *snapprof__cfi_table_find(snapprof__cfi_table_t *table, uintptr_t pc);

/* Sizes and costs, for the benchmark and the README. */
typedef struct snapprof__cfi_table_stats {
    size_t fdes;          /* FDEs in the index */
    size_t fdes_compiled; /* FDEs whose rows were made so far */
    size_t rows;          /* rows made so far */
    size_t fallback_rows; /* rows that hand their frame to another unwinder */
    size_t bytes;         /* memory of the index and the rows (not libdw's own) */
    uint64_t build_ns;    /* time spent opening the index and compiling FDEs */
} snapprof__cfi_table_stats_t;
void snapprof__cfi_table_stats(const snapprof__cfi_table_t *table,
                               snapprof__cfi_table_stats_t *out);

#endif
