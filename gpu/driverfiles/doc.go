// Package driverfiles finds the NVIDIA driver's user-space files on a host,
// the ones a container needs to run CUDA and NVML programs, as the NVIDIA
// container toolkit's "compute" and "utility" capabilities give them:
//
//   - libraries, named <name>.<driver version>: libcuda.so and libnvidia-ml.so
//     (required), and libnvidia-ptxjitcompiler.so, libnvidia-nvvm.so,
//     libnvidia-gpucomp.so, libcudadebugger.so, libnvidia-allocator.so,
//     libnvidia-cfg.so, libnvidia-opencl.so and the others of the toolkit's
//     lists where the driver has them;
//   - the programs nvidia-smi and nvidia-debugdump;
//   - the socket of nvidia-persistenced.
//
// The MPS control programs are not among them (gpumux runs the MPS daemons
// on the host), nor the GPU firmware (the kernel loads it).
//
// Files are looked for under a driver root ("/", or where a containerized
// driver keeps its files), in the directories of the root's
// /etc/ld.so.conf and in the usual library directories of this machine's
// architecture. A library must be a 64-bit ELF shared object of this
// machine: the 32-bit libraries some hosts have are passed over. Each file
// is given to a container at the path it has under the root, with every
// symbolic link on the way resolved (inside the root), and each library
// also under the names programs load it by: its SONAME (libcuda.so.1) and,
// for libcuda and libnvidia-ml, its unversioned name (libcuda.so) where the
// host has that link.
//
// Find never follows a link out of the root.
package driverfiles
