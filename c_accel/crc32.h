#ifndef HUTCH_CRC32_H
#define HUTCH_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* binascii.crc32(data[:len], crc) */
uint32_t hutch_crc32(const uint8_t *data, size_t len, uint32_t crc);

#endif
