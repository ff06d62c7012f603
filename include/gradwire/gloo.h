/* SPDX-License-Identifier: MIT */
/*
 * gloo.h - the GRADWIRE Gloo transport device for plain Gloo programs.
 *
 * The device carries every Gloo algorithm (the classic algorithm classes
 * with bound buffers, and the new-style gloo::allreduce() family with
 * unbound buffers) over gradwire: libfabric, exact bytes, frames
 * authenticated when GRADWIRE_MAC asks for it. It is configured like the
 * rest of gradwire, from the GRADWIRE_* variables (docs/configuration.md);
 * the provider is GRADWIRE_PROVIDER, not Gloo's interface or hostname.
 *
 *   #include <gradwire/gloo.h>
 *   auto dev = gradwire::gloo::CreateDevice();   // link -lgradwire_gloo
 *   auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
 *   ctx->connectFullMesh(store, dev);
 *
 * PyTorch finds the same device as GLOO_DEVICE_TRANSPORT=GRADWIRE once
 * libgradwire_gloo_torch.so is loaded (docs/integration.md).
 */
#ifndef GRADWIRE_GLOO_H
#define GRADWIRE_GLOO_H

#include <memory>

#include <gloo/transport/device.h>

namespace gradwire
{
namespace gloo
{

/* Reserved for options; everything comes from GRADWIRE_* today. */
struct attr {
};

/**
 * CreateDevice() - a device; its contexts connect through Gloo's rendezvous.
 * Throws gloo::InvalidOperationException when a GRADWIRE_* variable is
 * invalid (the message names it).
 */
__attribute__((visibility("default"))) std::shared_ptr<::gloo::transport::Device>
CreateDevice(const attr &a = attr());

} // namespace gloo
} // namespace gradwire

#endif
