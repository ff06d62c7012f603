/* SPDX-License-Identifier: MIT */
/*
 * bytes.h - reading and writing the fixed-size integers of gradwire's wire
 * formats (payloads, frames, handshake messages) at any alignment. The
 * formats are little-endian; gradwire builds for little-endian hosts only
 * (meson.build), so these are plain copies.
 */
#ifndef GW_BYTES_H
#define GW_BYTES_H

#include <stdint.h>
#include <string.h>

static inline void gw_put16(uint8_t *p, uint16_t v)
{
	memcpy(p, &v, 2);
}
static inline void gw_put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}
static inline void gw_put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}
static inline uint16_t gw_get16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}
static inline uint32_t gw_get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
static inline uint64_t gw_get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

#endif
