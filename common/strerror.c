/* SPDX-License-Identifier: MIT */
/* strerror.c - gw_strerror(): text for gradwire's negative errno returns. */
#include <errno.h>
#include <string.h>
#include "gradwire/gradwire.h"

const char *gw_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EBADMSG:
		return "malformed message (rejected)";
	case -EPROTONOSUPPORT:
		return "unsupported protocol version or codec";
	case -ENOSPC:
		return "output buffer too small";
	case -EKEYREJECTED:
		return "authentication failed (MAC mismatch or different keys)";
	case -ENOPROTOOPT:
		return "no common codec";
	case -ESTALE:
		return "a frame of another membership epoch (refused)";
	default:
		return err < 0 ? strerror(-err) : "not an error code";
	}
}
