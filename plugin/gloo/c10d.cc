// SPDX-License-Identifier: MIT
/*
 * c10d.cc - the GRADWIRE entry of PyTorch's c10d::GlooDeviceRegistry
 * (libgradwire_gloo_torch.so). Loading the library registers it; with
 * GLOO_DEVICE_TRANSPORT=GRADWIRE, torch.distributed's gloo backend creates
 * its devices with gradwire::gloo::CreateDevice().
 */
#define USE_C10D_GLOO 1

#include <torch/csrc/distributed/c10d/GlooDeviceFactory.hpp>

#include "gradwire/gloo.h"

namespace gradwire_gloo
{

namespace
{

// Gloo's interface and hostname are not used: GRADWIRE_PROVIDER and
// GRADWIRE_IFACE choose the fabric (CreateDevice() logs that).
std::shared_ptr<::gloo::transport::Device> makeDevice(const std::string &, const std::string &)
{
	return gradwire::gloo::CreateDevice();
}

} // namespace

} // namespace gradwire_gloo

namespace c10d
{
C10_REGISTER_CREATOR(GlooDeviceRegistry, GRADWIRE, gradwire_gloo::makeDevice);
} // namespace c10d
