/*
 * The device queries: count, handles, name, UUID, PCI location, compute
 * capability, MIG mode. Each is the interposer's CUDA answer (the
 * server's GPU, as the share sees it: device 0 of a token's one GPU).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "nvml_internal.h"

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	if (!nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (deviceCount == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*deviceCount = nvml_device_count();
	return NVML_SUCCESS;
}

/* The version-1 names of calls whose signature never changed. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
	return nvmlDeviceGetCount_v2(deviceCount);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (device == NULL || index >= nvml_device_count())
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = nvml_device_at(index);
	return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* uuid_string writes NVML's form of a device's UUID, "GPU-" and CUDA's 16
 * bytes as 8-4-4-4-12 lower-case hex digits (41 bytes with the NUL). */
static CUresult uuid_string(CUdevice dev, char out[41])
{
	CUuuid u;
	CUresult r = nvml_cu.DeviceGetUuid(&u, dev);
	if (r != CUDA_SUCCESS)
		return r;
	const unsigned char *b = (const unsigned char *)u.bytes;
	snprintf(out, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
		 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	return CUDA_SUCCESS;
}

/* find looks for the device match accepts; NVML_ERROR_NOT_FOUND if none. */
static nvmlReturn_t find(nvmlDevice_t *device, const void *key, nvmlReturn_t (*match)(struct nvmlDevice_st *, const void *))
{
	if (!nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (key == NULL || device == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < nvml_device_count(); i++) {
		nvmlReturn_t r = match(nvml_device_at(i), key);
		if (r == NVML_SUCCESS)
			*device = nvml_device_at(i);
		if (r != NVML_ERROR_NOT_FOUND)
			return r;
	}
	return NVML_ERROR_NOT_FOUND;
}

static nvmlReturn_t match_uuid(struct nvmlDevice_st *d, const void *key)
{
	char s[41];
	CUresult r = uuid_string(d->dev, s);
	if (r != CUDA_SUCCESS)
		return nvml_from_cuda(r);
	return strcasecmp(s, key) == 0 ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	return find(device, uuid, match_uuid);
}

/* A PCI location: domain, bus, device. */
struct pci_loc {
	unsigned domain, bus, device;
};

static nvmlReturn_t pci_location(CUdevice dev, struct pci_loc *loc)
{
	int v[3];
	static const CUdevice_attribute attrs[3] = {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
						    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID};
	for (int i = 0; i < 3; i++) {
		CUresult r = nvml_cu.DeviceGetAttribute(&v[i], attrs[i], dev);
		if (r != CUDA_SUCCESS)
			return nvml_from_cuda(r);
	}
	loc->domain = (unsigned)v[0];
	loc->bus = (unsigned)v[1];
	loc->device = (unsigned)v[2];
	return NVML_SUCCESS;
}

/* parse_bus_id reads NVML's accepted forms, hexadecimal:
 * domain:bus:device.function, domain:bus:device, bus:device.function. */
static int parse_bus_id(const char *s, struct pci_loc *loc)
{
	unsigned a, b, c, f;
	int n = -1;
	if (sscanf(s, "%x:%x:%x.%x%n", &a, &b, &c, &f, &n) == 4 && n > 0 && s[n] == 0) {
		*loc = (struct pci_loc){a, b, c};
		return 0;
	}
	n = -1;
	if (sscanf(s, "%x:%x:%x%n", &a, &b, &c, &n) == 3 && n > 0 && s[n] == 0) {
		*loc = (struct pci_loc){a, b, c};
		return 0;
	}
	n = -1;
	if (sscanf(s, "%x:%x.%x%n", &b, &c, &f, &n) == 3 && n > 0 && s[n] == 0) {
		*loc = (struct pci_loc){0, b, c};
		return 0;
	}
	return -1;
}

static nvmlReturn_t match_pci(struct nvmlDevice_st *d, const void *key)
{
	struct pci_loc want, have;
	if (parse_bus_id(key, &want) != 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = pci_location(d->dev, &have);
	if (r != NVML_SUCCESS)
		return r;
	return memcmp(&want, &have, sizeof want) == 0 ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
	if (pciBusId != NULL && strnlen(pciBusId, NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE) == NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE)
		return NVML_ERROR_INVALID_ARGUMENT;
	return find(device, pciBusId, match_pci);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	if (index == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*index = d->index;
	return NVML_SUCCESS;
}

/* copy_out puts s into a caller's buffer of length bytes, or says how
 * NVML does that it does not fit. */
static nvmlReturn_t copy_out(char *buf, unsigned int length, const char *s)
{
	if (buf == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	size_t n = strlen(s);
	if (n >= length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, n + 1);
	return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	char s[256];
	CUresult cr = nvml_cu.DeviceGetName(s, (int)sizeof s, d->dev);
	if (cr != CUDA_SUCCESS)
		return nvml_from_cuda(cr);
	s[sizeof s - 1] = 0;
	return copy_out(name, length, s);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	char s[41];
	CUresult cr = uuid_string(d->dev, s);
	if (cr != CUDA_SUCCESS)
		return nvml_from_cuda(cr);
	return copy_out(uuid, length, s);
}

/* nvmlDeviceGetPciInfo_v3: the location CUDA reports. The PCI device and
 * subsystem IDs are not among CUDA's attributes: they are 0. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	if (pci == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct pci_loc loc;
	if ((r = pci_location(d->dev, &loc)) != NVML_SUCCESS)
		return r;
	memset(pci, 0, sizeof *pci);
	pci->domain = loc.domain;
	pci->bus = loc.bus;
	pci->device = loc.device;
	snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", loc.domain, loc.bus, loc.device);
	snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", loc.domain & 0xffff, loc.bus & 0xff,
		 loc.device & 0xff);
	return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	if (major == NULL || minor == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	int v[2];
	CUresult cr = nvml_cu.DeviceGetAttribute(&v[0], CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
	if (cr == CUDA_SUCCESS)
		cr = nvml_cu.DeviceGetAttribute(&v[1], CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
	if (cr != CUDA_SUCCESS)
		return nvml_from_cuda(cr);
	*major = v[0];
	*minor = v[1];
	return NVML_SUCCESS;
}

/* MIG: a share is not a MIG device, and cannot change the GPU's mode. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	if (currentMode == NULL || pendingMode == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*currentMode = *pendingMode = NVML_DEVICE_MIG_DISABLE;
	return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	if (isMigDevice == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*isMigDevice = 0;
	return NVML_SUCCESS;
}

/* nvmlDeviceGetBrand: CUDA does not say; NVML_BRAND_UNKNOWN. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	if (type == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*type = NVML_BRAND_UNKNOWN;
	return NVML_SUCCESS;
}
