/* SPDX-License-Identifier: MIT */
/*
 * gradwire.h - common definitions of the gradwire runtime API.
 *
 * Every function returns 0 or a negative errno; functions that return a size
 * return ssize_t (bytes, or a negative errno). gw_strerror() names them.
 */
#ifndef GRADWIRE_GRADWIRE_H
#define GRADWIRE_GRADWIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#if defined(__GNUC__)
#define GW_API __attribute__((visibility("default")))
#else
#define GW_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define GW_VERSION_MAJOR 0
#define GW_VERSION_MINOR 1

/**
 * gw_strerror() - text for a gradwire return code.
 * @err: 0 or a negative errno returned by a gw_ function.
 *
 * Return: a static string; never NULL.
 */
GW_API const char *gw_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
