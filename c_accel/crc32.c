/* CRC-32 as binascii.crc32 computes it (zlib's: reflected, polynomial 0xEDB88320), eight
 * bytes a step: the one copy the C twins share (streams.c checks stream records with it,
 * messages.c the journal's). The tables are made at the first call (under the GIL). */

#include "crc32.h"

/* Slicing by 8: table[k][b] is the CRC of byte b followed by k zero bytes. */
static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void)
{
    uint32_t n, k, c;
    if (crc_ready)
        return;
    for (n = 0; n < 256; n++) {
        c = n;
        for (k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (n = 0; n < 256; n++) {
        c = crc_table[0][n];
        for (k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
    crc_ready = 1;
}

uint32_t hutch_crc32(const uint8_t *data, size_t len, uint32_t crc)
{
    uint32_t c = ~crc;
    crc_init();
    while (len >= 8) {
        uint32_t low = c ^ ((uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16
                            | (uint32_t)data[3] << 24);
        c = crc_table[7][low & 0xFF] ^ crc_table[6][(low >> 8) & 0xFF] ^ crc_table[5][(low >> 16) & 0xFF]
          ^ crc_table[4][low >> 24] ^ crc_table[3][data[4]] ^ crc_table[2][data[5]] ^ crc_table[1][data[6]]
          ^ crc_table[0][data[7]];
        data += 8;
        len -= 8;
    }
    while (len--)
        c = crc_table[0][(c ^ *data++) & 0xFF] ^ (c >> 8);
    return ~c;
}

