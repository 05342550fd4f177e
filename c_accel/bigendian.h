/* hutch C accelerator: big-endian integers, as AMQP and the journal's records write them.
 * One copy for every C file (static inline: each gets its own, with no call). */
#ifndef HUTCH_BIGENDIAN_H
#define HUTCH_BIGENDIAN_H

#include <stdint.h>

static inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

static inline uint8_t *put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    return p + 2;
}

static inline uint8_t *put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

static inline uint8_t *put64(uint8_t *p, uint64_t v)
{
    return put32(put32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

#endif
