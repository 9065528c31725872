/* TensorBoard event files (--tensorboard DIR): the metrics file's scalars as
 * Event protobufs in TFRecord framing, the format `tensorboard --logdir DIR`
 * reads. Written by the metrics module (metrics.c) beside each JSON line. */
#ifndef KILN_TENSORBOARD_H
#define KILN_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include "kiln/status.h"

typedef struct kiln_tb kiln_tb;

typedef struct kiln_tb_scalar {
    const char *tag; /* "train/loss" */
    double value;    /* stored as float (simple_value); a non-finite one is left out, as the JSON line's null */
} kiln_tb_scalar;

/* creates DIR (and missing parents) and DIR/events.out.tfevents.<seconds>.<host>[.N]
 * starting with the file_version event; a resumed run gets a new file beside the old */
kiln_status kiln_tb_open(const char *dir, kiln_tb **out);
/* one event at `step` (the global step) holding the scalars, flushed */
kiln_status kiln_tb_scalars(kiln_tb *tb, int64_t step, const kiln_tb_scalar *s, int n);
void kiln_tb_close(kiln_tb *tb);
/* the event file's path (for messages and tests) */
const char *kiln_tb_path(const kiln_tb *tb);

/* TFRecord's checksum: CRC-32C (Castagnoli), masked as TensorFlow does */
uint32_t kiln_crc32c_masked(const uint8_t *p, size_t n);

#endif
