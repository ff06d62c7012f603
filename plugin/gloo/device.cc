// SPDX-License-Identifier: MIT
/*
 * device.cc - the GRADWIRE Gloo device: gradwire::gloo::CreateDevice()
 * (include/gradwire/gloo.h) and the probes tests and tools read.
 * device.h lists the other parts.
 */
#include "gradwire/gloo.h"
#include "device.h"

namespace gradwire_gloo
{

namespace
{

class Device : public ::gloo::transport::Device
{
      public:
	std::string str() const override { return "gradwire"; }
	const std::string &getPCIBusID() const override { return bus_; }
	std::shared_ptr<::gloo::transport::Context> createContext(int rank, int size) override
	{
		return std::make_shared<Context>(rank, size);
	}

      private:
	std::string bus_;
};

} // namespace

} // namespace gradwire_gloo

namespace gradwire
{
namespace gloo
{

std::shared_ptr<::gloo::transport::Device> CreateDevice(const attr &)
{
	char err[512];
	int timeout_ms = 0;
	int rc = gwg_config_check(&timeout_ms, err, sizeof(err));

	if (rc) {
		gradwire_gloo::log(gradwire_gloo::LOG_ERROR, -1, err);
		GLOO_THROW_INVALID_OPERATION_EXCEPTION("gradwire: ", err);
	}
	gradwire_gloo::log(gradwire_gloo::LOG_INFO, -1,
			   "Gloo device GRADWIRE created (Gloo's interface and "
			   "hostname are not used: GRADWIRE_PROVIDER and "
			   "GRADWIRE_IFACE choose the fabric)");
	return std::make_shared<gradwire_gloo::Device>();
}

} // namespace gloo
} // namespace gradwire

// For tests and tools: what this process did through the device.
extern "C" __attribute__((visibility("default"))) int gradwire_gloo_contexts(void)
{
	return gradwire_gloo::g_contexts.load();
}

extern "C" __attribute__((visibility("default"))) unsigned long long gradwire_gloo_bytes(void)
{
	return gradwire_gloo::g_bytes.load();
}
